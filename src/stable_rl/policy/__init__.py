"""The policy being trained, any HF causal LM: its base LightningModule (``module``) and runtime switches
(``runtime``), the log-prob head (``logprobs``), packed rows (``packing``), FSDP2 sharding (``sharding``), model
directory checks, a resumed run's optimizer settings, and sparse upcycling of a dense model (``upcycle``)."""
