"""The floating-point precisions a policy or a rollout engine may run in, by the names configs use."""

from typing import Literal

Dtype = Literal["float32", "bfloat16", "float16"]
