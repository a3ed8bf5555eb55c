"""SFTModule: the cold start, maximum likelihood of worked solutions (token mean over responses)."""

from stable_rl.policy.module import HFPolicyModule
from stable_rl.sft.datamodule import TokenBatch


class SFTModule(HFPolicyModule):
    """Fine-tunes ``policy`` on (prompt, solution) pairs; the loss is the mean negative log-likelihood
    of the response tokens. Args as in ``HFPolicyModule``."""

    def _loss(self, batch: TokenBatch):
        logprobs, _ = self(batch.input_ids, batch.attention_mask, batch.response_mask, entropy=False)
        return -logprobs.sum() / batch.response_mask.sum()

    def training_step(self, batch: TokenBatch, batch_idx: int):
        loss = self._loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch.input_ids.shape[0])
        return loss

    def validation_step(self, batch: TokenBatch, batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch), prog_bar=True, batch_size=batch.input_ids.shape[0])
