"""Group-baseline advantages (paper, MiniRL: A = R - mean of the G rewards of the prompt)."""

from torch import Tensor


def group_advantages(rewards: Tensor, std_normalize: bool = False, eps: float = 1e-6) -> Tensor:
    """A(x, y_i) = R_i - mean_j R_j over the G responses of one prompt, optionally / (std_j R_j + eps).

    ``rewards`` [P, G] -> [P, G]. MiniRL uses no std division; GRPO and CISPO (the paper's
    baselines) divide by the unbiased group standard deviation.
    """
    if rewards.shape[-1] < 2:
        raise ValueError(
            f"group baseline needs at least 2 responses per prompt, got group_size={rewards.shape[-1]}: "
            "set data.group_size >= 2 (the paper uses 16)"
        )
    centered = rewards - rewards.mean(dim=-1, keepdim=True)  # [P, G]
    if not std_normalize:
        return centered
    return centered / (rewards.std(dim=-1, keepdim=True) + eps)  # [P, G]
