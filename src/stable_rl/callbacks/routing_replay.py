"""Routing Replay for MoE policies (paper Sec. 3.3), enabled by listing it under ``trainer.callbacks``.

With routing in the ratio, pi_theta/mu_old also moves when a token's experts change, which the
token-level surrogate does not model. Replay fixes the experts during the update:
- R2 replays the routes the *training* engine chose in the pi_old pass, in every mini-batch update
  (on the first mini-batch it changes nothing: there pi_theta = pi_old).
- R3 replays the routes the *rollout* engine chose while sampling, in the pi_old pass and every update
  (the callback turns on the engine's ``return_routes``).
Gate weights always come from the training router's own logits, so the router keeps its gradient.

Logged each step (``train/routing/...``): ``infer_agreement`` (and ``/layer{i}``), the fraction of
tokens whose top-k set in the training engine matches the rollout engine's, before replay;
``update_agreement``, the same between the replayed routes and the updated policy's own choice;
``replayed_routes``, the token-layers whose router output the replayed experts replaced in the step's
forwards (each token that needs a route, each MoE layer, each forward that replays: R3's pi_old pass and
every update; R2's updates after the first mini-batch, so not logged at N = 1, where R2 replays nothing); and,
for R3, ``train/kl_no_replay`` and
``train/kl_k3_no_replay``, the training-inference KL had pi_old not replayed the routes (``train/kl``,
``train/kl_k3`` are then the KL with replay).

Replay cannot fail silently: every replay checks that each needed token has a route in range, its top-k experts
distinct, not an all-zero table (``RouterHooks``); R3 also checks that the rollout's routes sit on the tokens they
belong to (``check_alignment``). The checks run on the batch's device.
"""

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Literal

import lightning as L
import torch
from torch import Tensor

from stable_rl.callbacks.policy_forward import Phase, PolicyForwardCallback
from stable_rl.interfaces import TrainedPolicy, route_source, trained_policy
from stable_rl.metrics import token_kl
from stable_rl.routing import ROUTE_DTYPE, RouterHooks, routed_positions, routes_match


class RoutingReplay(PolicyForwardCallback):
    """Replay routed experts in the policy update.

    Args:
        mode: "R2" (replay the pi_old pass's routes) or "R3" (replay the rollout engine's routes).
        diagnostics: R3 only: one extra no-grad forward per pi_old micro-batch without replay, giving the
            routing agreement before replay and ``kl_no_replay``. (R2 gets the agreement for free when the
            engine returns routes.)
    """

    def __init__(self, mode: Literal["R2", "R3"], diagnostics: bool = True) -> None:
        if mode not in ("R2", "R3"):
            raise ValueError(f"RoutingReplay mode {mode!r}: use 'R2' (training routes) or 'R3' (rollout routes)")
        self.mode = mode
        self.diagnostics = diagnostics
        self.hooks: RouterHooks | None = None
        self.old_routes: Tensor | None = None  # R2: [M, L, layers, k] routes of this step's pi_old pass
        self.replayed: Tensor | None = None  # [M] bool: rows whose routes an update has replayed

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.mode == "R3":
            source = route_source(trainer)
            if source is None:
                raise ValueError(
                    "RoutingReplay(mode='R3') replays the rollout engine's routes: use a data module with a "
                    "rollout engine (stable_rl.rl.RolloutDataModule), or mode 'R2'"
                )
            source.request_routes()

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        policy = trained_policy(pl_module, "RoutingReplay").policy
        self.hooks = RouterHooks(policy)  # a dense or unsupported model fails here

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.hooks = self.old_routes = self.replayed = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        if self.mode == "R3" and batch.routes is None:
            raise ValueError(
                "RoutingReplay(mode='R3') got a rollout batch without routes: the engine must return them "
                "(set data.engine.init_args.return_routes: true)"
            )
        if self.mode == "R3":
            check_alignment(batch.routes, batch.attention_mask)
        self.replayed = torch.zeros(batch.num_rows, dtype=torch.bool)
        self.old_routes = None  # R2: allocated by the first pi_old recompute (mini-batches 2..N), full width
        self._routes_shape = (*batch.input_ids.shape, self.hooks.num_layers, self.hooks.top_k)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        if not self.replayed.all():
            raise RuntimeError(
                f"routes of {int((~self.replayed).sum())} of {batch.num_rows} rollouts were never replayed in "
                "an update: every row of the global batch must go through one mini-batch"
            )

    @contextmanager
    def policy_forward(self, module: TrainedPolicy, phase: Phase, batch) -> Iterator[None]:
        """ "old": R2 records the routes, R3 replays the rollout's; "update": both replay; "first" (the
        first mini-batch, whose update forward is also its pi_old pass): R2 records (replaying pi_old's
        own routes changes nothing), R3 replays; "generation" (log pi_gen of a rollout in flight): R3 replays as
        for pi_old, R2 lets the routers choose (it replays within a step only)."""
        if phase == "generation":
            replay = self.mode == "R3" and batch.routes is not None  # none: on_train_batch_start names the fix
            packed = module.runtime.packed_sequences
            with self.hooks.replay(batch.routes, batch.attention_mask, packed) if replay else nullcontext():
                yield
            return
        needed = routed_positions(batch.attention_mask)
        if self.mode == "R2" and phase in ("old", "first"):
            with self.hooks.record(batch.input_ids, batch.attention_mask, module.runtime.packed_sequences):
                yield
            if phase == "old":  # the first mini-batch's routes serve its own update only: nothing to keep
                self._keep_old_routes(batch.row_index, self.hooks.own)
            if batch.routes is not None:
                self._log_match(module, "infer_agreement", self.hooks.own, batch.routes, needed)
            if phase == "first":
                self._replayed(module, batch, self.hooks.own, needed)
            return
        if self.mode == "R3" and phase in ("old", "first") and self.diagnostics:
            self._diagnose(module, batch, needed)
        if self.mode == "R3" or phase == "old":
            routes = batch.routes
        else:  # R2 update; micro-batches are cut to their longest row
            routes = self.old_routes[batch.row_index.to(self.old_routes.device), : batch.input_ids.shape[1]]
        with self.hooks.replay(routes, batch.attention_mask, module.runtime.packed_sequences):
            yield
        module.step_metrics.total(
            "routing/replayed_routes", self.hooks.replayed_routes
        )  # a tensor on the batch's device
        if phase != "old":
            self._replayed(module, batch, routes, needed)

    def _replayed(self, module: TrainedPolicy, batch, routes: Tensor, needed: Tensor) -> None:
        """An update ran on ``routes``: mark its rows, log how many the updated policy would route alike."""
        self.replayed[batch.row_index.cpu()] = True
        self._log_match(module, "update_agreement", self.hooks.own, routes, needed)

    def _keep_old_routes(self, rows: Tensor, routes: Tensor) -> None:
        """Store one pi_old micro-batch's routes [m, width, layers, k] at its rows of the global batch."""
        if self.old_routes is None:
            self.old_routes = torch.full(self._routes_shape, -1, dtype=ROUTE_DTYPE, device=routes.device)
        self.old_routes[rows.to(self.old_routes.device), : routes.shape[1]] = routes.to(ROUTE_DTYPE)

    @torch.no_grad()
    def _diagnose(self, module: TrainedPolicy, batch, needed: Tensor) -> None:
        """R3's view of the mismatch before replay: the training routers' own choice and log-probs."""
        with self.hooks.record(batch.input_ids, batch.attention_mask, module.runtime.packed_sequences):
            logprobs, _ = module.batch_logprobs(batch, entropy=False)
        mask = batch.response_mask
        module.step_metrics.mean("kl_no_replay", batch.rollout_logprobs - logprobs, mask)
        module.step_metrics.mean("kl_k3_no_replay", token_kl(batch.rollout_logprobs, logprobs), mask)
        self._log_match(module, "infer_agreement", self.hooks.own, batch.routes, needed)

    def _log_match(self, module: TrainedPolicy, name: str, own: Tensor, routes: Tensor, needed: Tensor) -> None:
        """Agreement of two routings over the tokens that need a route, overall and per MoE layer."""
        same = routes_match(own, routes)[needed.to(own.device)]  # [tokens, layers]
        module.step_metrics.mean(f"routing/{name}", same)
        for layer in range(same.shape[-1]):
            module.step_metrics.mean(f"routing/{name}/layer{layer}", same[:, layer])


def check_alignment(routes: Tensor, attention_mask: Tensor) -> None:
    """The rollout engine's routes [M, L, layers, k] sit where the tokens that need one are, and nowhere else: a
    route at padding or at a row's last token (never fed to the model, so never routed) means the routes are
    shifted against the tokens."""
    stray = ~routed_positions(attention_mask) & (routes.to(attention_mask.device) >= 0).any(-1).any(-1)
    if stray.any():
        row, position = (int(i) for i in stray.nonzero()[0])
        last = int(attention_mask[row].sum()) - 1
        where = "its last token" if position == last else "padding"
        raise ValueError(
            f"the rollout's routes of row {row} hold a route at position {position}, {where}, which no engine routes "
            f"({int(stray.sum())} such positions): the routes are off by one against the tokens; check the engine's "
            "route capture (VLLMEngine: vLLM's routed_experts or its router hook)"
        )
