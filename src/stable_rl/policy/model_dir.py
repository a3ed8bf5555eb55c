"""The model directory checked before anything loads it: by the data modules before they load its tokenizer
(the first thing a run loads), and by the policy module before it loads the weights (training on given token
ids needs no tokenizer). Building the objects looks nothing up, so a recipe of a hub model parses offline.

transformers and vLLM meet a bad ``model_path`` later and less clearly: a missing directory as a failed
hub download, a directory without tokenizer files as an empty tokenizer (every prompt encoded as unknown
tokens), a tokenizer of another model only once one of its ids beyond the embedding is met.
"""

from pathlib import Path

from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # any one: fast, sentencepiece, BPE
_PACKAGE_ROOT = Path(__file__).resolve().parents[3]  # the checkout of an editable install, whose recipes use data/


def check_model_dir(model_path: str) -> None:
    """Refuse a ``model_path`` that is neither a model directory nor a hub model, or a directory without config."""
    if Path(model_path).is_dir():
        _check_files(model_path, ("config.json",))
    else:
        _check_hub_name(model_path)


def checked_tokenizer(model_path: str) -> PreTrainedTokenizerBase:
    """The model's tokenizer, after ``check_model_dir``; refuses a model directory without tokenizer files, and a
    tokenizer with ids beyond the model's vocabulary."""
    check_model_dir(model_path)
    if Path(model_path).is_dir():
        _check_files(model_path, TOKENIZER_FILES)
    vocab_size = getattr(AutoConfig.from_pretrained(model_path).get_text_config(), "vocab_size", None)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    largest_id = max(tokenizer.get_vocab().values())
    if vocab_size is not None and largest_id >= vocab_size:
        raise ValueError(
            f"the tokenizer of {model_path} has ids up to {largest_id}, beyond the model's vocabulary of {vocab_size} "
            "(vocab_size in its config.json): a tokenizer of another model? Use the tokenizer the model was trained "
            "with, or resize the model's embeddings to the tokenizer (resize_token_embeddings, then save_pretrained)"
        )
    return tokenizer


def _check_files(model_path: str, names: tuple[str, ...]) -> None:
    """The directory must hold one of ``names``."""
    if not any((Path(model_path) / name).is_file() for name in names):
        raise FileNotFoundError(
            f"model directory {model_path} has no {' or '.join(names)}: copy the config and tokenizer files "
            "from the model the weights came from (its save_pretrained), or set model.init_args.model_path to "
            "a complete model directory"
        )


def _check_hub_name(model_path: str) -> None:
    """A ``model_path`` that is no directory here must be a model on the Hugging Face hub (or in its cache)."""
    try:
        AutoConfig.from_pretrained(model_path)
    except OSError as error:
        resolved, elsewhere = Path(model_path).resolve(), _PACKAGE_ROOT / model_path
        hint = f" It exists as {elsewhere}: run from {_PACKAGE_ROOT} or give that path." if elsewhere.is_dir() else ""
        raise FileNotFoundError(
            f"model directory {model_path} not found: there is no {resolved} (a relative model_path is read from the "
            f"working directory, {Path.cwd()}), and no hub model of that name could be loaded ({str(error).splitlines()[0]})."
            f"{hint} Set model.init_args.model_path to the model's directory"
        ) from None
