"""How a question becomes prompt tokens: the instruction and the tokenizer's chat template."""

from transformers import PreTrainedTokenizerBase

DEFAULT_INSTRUCTION = "{question}\nPut your final answer within \\boxed{}."


class PromptTemplate:
    """Wraps each question in an instruction asking for a ``\\boxed{}`` answer.

    Args:
        instruction: text with a ``{question}`` placeholder (other braces are literal).
        system: optional system message.
        chat: apply the tokenizer's chat template (False: the instruction text alone).
    """

    def __init__(self, instruction: str = DEFAULT_INSTRUCTION, system: str | None = None, chat: bool = True) -> None:
        if "{question}" not in instruction:
            raise ValueError(f"instruction {instruction!r} has no {{question}} placeholder: add one")
        self.instruction = instruction
        self.system = system
        self.chat = chat

    def encode(self, tokenizer: PreTrainedTokenizerBase, question: str) -> list[int]:
        """Prompt token ids for ``question``, ending where the response starts."""
        text = self.instruction.replace("{question}", question)
        if not self.chat:
            return tokenizer(text, add_special_tokens=True)["input_ids"]
        if tokenizer.chat_template is None:
            raise ValueError(
                f"tokenizer {tokenizer.name_or_path!r} has no chat template: set "
                "data.template.init_args.chat=false, or use a tokenizer that ships one"
            )
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": text})
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(rendered, add_special_tokens=False)["input_ids"]
