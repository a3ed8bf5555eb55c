"""BatchPlan: the geometry of one global step, validated once and handed to whoever needs a part of it.

P prompts x G responses form the global batch; it is cut into N mini-batches (one optimizer update
each), and every mini-batch is shared by the data-parallel processes, each forwarding its share in
micro-batches. Consecutive processes may share one rollout engine (vLLM tensor parallelism): the engine
samples the prompts of all of them, each keeps its own.
"""

from dataclasses import dataclass


def share_of(total: int, blocks: int, parts: int, part: int) -> list[int]:
    """Positions of share ``part`` of ``parts`` when ``total`` positions form ``blocks`` consecutive blocks
    (mini-batches), each split into ``parts`` consecutive shares."""
    block, share = total // blocks, total // (blocks * parts)
    return [start + part * share + i for start in range(0, total, block) for i in range(share)]


@dataclass(frozen=True)
class BatchPlan:
    """How a global step's responses are cut into updates and shared by processes and engines.

    Built once per fit by ``RolloutDataModule.setup``; every ``RolloutBatch`` carries it to
    ``PolicyModule``; ``PromptBatches`` and the rollout engine take their shares from it.

    Args:
        prompts_per_step: P, prompts per global step (``data.prompts_per_step``).
        group_size: G, responses per prompt (``data.group_size``).
        mini_batch_size: responses per optimizer update over all processes (``data.mini_batch_size``);
            None: the whole global batch (N = 1).
        micro_batch_size: responses per forward of one process (``data.micro_batch_size``); None: the
            process's share of a mini-batch.
        processes: data-parallel training processes (``trainer.world_size``).
        tensor_parallel_size: consecutive processes that share one rollout engine when there are several.
        devices_per_node: processes per node, which an engine may not span; None: not checked.
        max_staleness: k, steps between the weights that generate a batch and the step that trains on it
            (``data.max_staleness``; 0: synchronous, on-policy lag 0).
    """

    prompts_per_step: int
    group_size: int
    mini_batch_size: int | None = None
    micro_batch_size: int | None = None
    processes: int = 1
    tensor_parallel_size: int = 1
    devices_per_node: int | None = None
    max_staleness: int = 0

    def __post_init__(self) -> None:
        processes, g, mini, total = self.processes, self.group_size, self.mini, self.global_batch_size
        if processes > 1 and processes % self.tensor_parallel_size:
            raise ValueError(
                f"{processes} data-parallel processes cannot share engines of tensor_parallel_size="
                f"{self.tensor_parallel_size}: choose a divisor of trainer.devices x trainer.num_nodes"
            )
        if self.devices_per_node is not None and self.devices_per_node % self.processes_per_engine:
            raise ValueError(
                f"vLLM engines shared by {self.processes_per_engine} processes (tensor_parallel_size) would span "
                f"two nodes of trainer.devices={self.devices_per_node}: choose a divisor of trainer.devices"
            )
        if total % processes:
            raise ValueError(
                f"global batch of {total} responses cannot be shared by {processes} processes: "
                "choose data.prompts_per_step as a multiple of trainer.devices x trainer.num_nodes"
            )
        if processes > 1 and self.mini_batch_size is not None and mini % (g * processes):
            raise ValueError(
                f"data.mini_batch_size={mini} responses cannot be shared by {processes} processes in whole groups of "
                f"data.group_size={g}: choose a multiple of {g * processes}"
            )
        if total % mini or mini % processes or self.mini_rows % self.micro_rows:
            raise ValueError(
                f"global batch of {total} responses (data.prompts_per_step x data.group_size) must be "
                f"divisible by data.mini_batch_size={mini}, that by the {processes} data-parallel process(es), "
                f"and each process's share by data.micro_batch_size={self.micro_rows}: choose sizes that divide evenly"
            )
        if self.prompts_per_step % (self.prompt_blocks * processes):
            raise ValueError(
                f"data.prompts_per_step={self.prompts_per_step} cannot be shared by {processes} processes "
                f"(trainer.devices x trainer.num_nodes) in each of its {self.prompt_blocks} mini-batch(es): choose a "
                f"multiple of {self.prompt_blocks * processes} (processes x mini-batches)"
            )

    @property
    def global_batch_size(self) -> int:
        """Responses per global step, P x G."""
        return self.prompts_per_step * self.group_size

    @property
    def mini(self) -> int:
        """Responses per optimizer update, over all processes."""
        return self.mini_batch_size or self.global_batch_size

    @property
    def updates(self) -> int:
        """N, optimizer updates per global step (1: on-policy)."""
        return self.global_batch_size // self.mini

    @property
    def mini_rows(self) -> int:
        """Responses of one process in each mini-batch."""
        return self.mini // self.processes

    @property
    def micro_rows(self) -> int:
        """Responses per forward of one process."""
        return min(self.micro_batch_size or self.mini_rows, self.mini_rows)

    @property
    def prompt_blocks(self) -> int:
        """Blocks whose consecutive shares the processes take of a step's prompts: the N mini-batches when
        several processes share them (each then holds its part of every update), else 1."""
        return self.updates if self.processes > 1 else 1

    @property
    def processes_per_engine(self) -> int:
        """Consecutive processes sharing one rollout engine (1 for a single process)."""
        return self.tensor_parallel_size if self.processes > 1 else 1

    @property
    def engines(self) -> int:
        """Rollout engines of the run, each sampling its own prompts."""
        return self.processes // self.processes_per_engine

    def engine_rank(self, process: int) -> int:
        """Which engine serves ``process``."""
        return process // self.processes_per_engine

    def engine_share(self, process: int) -> list[int]:
        """Positions, among a step's P prompts, of those the engine of ``process`` samples: its consecutive
        share of every mini-batch."""
        return share_of(self.prompts_per_step, self.prompt_blocks, self.engines, self.engine_rank(process))

    def own_share(self, process: int) -> list[int]:
        """Positions, among its engine's prompts, of those ``process`` trains on: the part it would have
        sampled with an engine of its own."""
        shared = self.processes_per_engine
        return share_of(self.prompts_per_step // self.engines, self.prompt_blocks, shared, process % shared)
