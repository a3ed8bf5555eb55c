"""Prompt sources and the template: seeded problems, file rows, and the errors that name the fix."""

import json

import pytest

from stable_rl.data import FilePrompts, Problem, PromptTemplate, ReasoningGymPrompts


def test_reasoning_gym_is_seeded_and_interleaves_generators():
    first = ReasoningGymPrompts(["basic_arithmetic", "chain_sum"], size=3, seed=7).load()
    again = ReasoningGymPrompts(["basic_arithmetic", "chain_sum"], size=3, seed=7).load()
    other = ReasoningGymPrompts(["basic_arithmetic", "chain_sum"], size=3, seed=8).load()
    assert first == again and first != other and len(first) == 6
    assert all(isinstance(p, Problem) and p.answer for p in first)
    assert first[0].question.startswith("Calculate")  # basic_arithmetic
    assert "=" in first[3].question  # chain_sum


def test_unknown_generator_is_named():
    with pytest.raises(ValueError, match=r"reasoning-gym generator 'basic_arithmetik' with settings \{\} failed"):
        ReasoningGymPrompts(["basic_arithmetik"], size=2).load()


@pytest.mark.parametrize(("generators", "size"), [([], 4), (None, 0), (["chain_sum"], -3)])
def test_no_generator_or_no_problems_is_refused_when_configured(generators, size):
    """An empty list silently meant basic_arithmetic; size 0 left an evaluation set 'no problems after removing training
    questions', a negative size failed inside reasoning-gym ("__len__() should return >= 0")."""
    with pytest.raises(ValueError) as caught:
        ReasoningGymPrompts(generators, size=size)
    assert str(caught.value) == (
        f"ReasoningGymPrompts generators={generators}, size={size}: give at least one generator (None: "
        "basic_arithmetic) and at least 1 problem per generator"
    )


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_file_prompts_read_named_columns(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"q": "1+1?", "a": 2}, {"q": "2+3?", "a": "5"}])
    assert FilePrompts(path, prompt_field="q", answer_field="a").load() == [Problem("1+1?", "2"), Problem("2+3?", "5")]


def test_answers_are_read_as_written(tmp_path):
    rows = '{"prompt": "a?", "answer": 0.00001}\n{"prompt": "b?", "answer": 123456789012345678901234567890}\n'
    (tmp_path / "p.jsonl").write_text(rows + '{"prompt": "c?", "answer": "1/3"}\n')
    assert [p.answer for p in FilePrompts(str(tmp_path / "p.jsonl")).load()] == [
        "0.00001",
        "123456789012345678901234567890",
        "1/3",
    ]
    (tmp_path / "p.csv").write_text("prompt,answer\na?,0.00001\nb?,1e3\n")
    assert [p.answer for p in FilePrompts(str(tmp_path / "p.csv")).load()] == ["0.00001", "1e3"]


@pytest.mark.parametrize("answer", [[1, 2], {"x": 1}, True])
def test_an_answer_that_cannot_be_a_gold_answer_is_refused(tmp_path, answer):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1?", "answer": answer}])
    with pytest.raises(ValueError, match=r"row 0 of .* has a (list|dict|bool) .* write it as a string"):
        FilePrompts(path).load()


def test_row_without_answer_names_row_and_fix(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+3?", "answer": ""}])
    with pytest.raises(ValueError, match=r"row 1 of .* has no 'answer': every row needs .* prompt_field/answer_field"):
        FilePrompts(path).load()


def test_whitespace_only_prompt_is_refused_like_an_empty_one(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1?", "answer": "2"}, {"prompt": " \n\t", "answer": "5"}])
    with pytest.raises(ValueError, match=r"row 1 of .* has no 'prompt': every row needs a question"):
        FilePrompts(path).load()


def test_missing_or_empty_file_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"set data\.prompts\.init_args\.path"):
        FilePrompts(str(tmp_path / "nope.jsonl")).load()
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="has no rows"):
        FilePrompts(str(tmp_path / "empty.jsonl")).load()
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(ValueError, match=r"suffix '.txt'; use one of"):
        FilePrompts(str(tmp_path / "p.txt")).load()


def test_template_renders_chat_and_boxed_instruction(tokenizer):
    ids = PromptTemplate().encode(tokenizer, "What is 2+3?")
    assert tokenizer.decode(ids) == (
        "<|im_start|>user\nWhat is 2+3?\nPut your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )
    plain = PromptTemplate(instruction="Q: {question} A:", chat=False).encode(tokenizer, "1+1?")
    assert tokenizer.decode(plain) == "Q: 1+1? A:"


def test_template_without_placeholder_or_chat_template_names_the_fix(tokenizer):
    with pytest.raises(ValueError, match=r"no \{question\} placeholder"):
        PromptTemplate(instruction="Solve it.")
    bare = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    bare.chat_template = None
    with pytest.raises(ValueError, match=r"has no chat template: set data\.template\.init_args\.chat=false"):
        PromptTemplate().encode(bare, "1+1?")


def refusal(path) -> str:
    """The message of loading prompt file ``path``."""
    with pytest.raises((ValueError, OSError)) as caught:
        FilePrompts(str(path)).load()
    return str(caught.value)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "p.jsonl",
            b'{"prompt": "1?", "answer": "1"}\n\n{"prompt": "caf\xe9?", "answer": "2"}\n',
            "prompt file {path} is not UTF-8 (byte 0xe9 on line 3): save it as UTF-8, e.g. iconv -f latin1 -t "
            "utf-8 {path} > utf8.jsonl",
        ),
        (
            "p.jsonl",
            b'{"prompt": "1?", "answer": "1"}\n\n{"prompt": "2?", "answer": "2"\n',
            "line 3 of prompt file {path} is not valid JSON (Expecting ',' delimiter, column 31): fix that line",
        ),
        (
            "p.json",
            b'[\n  {"prompt": "1?", "answer": "1"},\n  {"prompt": "2?" "answer": "2"}\n]',
            "line 3 of prompt file {path} is not valid JSON (Expecting ',' delimiter, column 19): fix that line",
        ),
        (
            "p.csv",
            b'prompt,answer\n1?,1\n"2?,2\n' + b"3?,3\n" * 40_000,
            "the row starting on line 3 of prompt file {path}: field larger than field limit (131072): close its "
            "quotes (an unclosed quote runs a field on to the end of the file) or shorten the field",
        ),
        ("p.jsonl", b"\n  \n\n", "prompt file {path} has no rows: give it at least one prompt/answer"),
        (
            "p.json",
            b"[" * 100_000 + b"]" * 100_000,
            "prompt file {path} from line 1 nests its JSON deeper than the reader can follow: a row is one object "
            '{{"prompt": ..., "answer": ...}} of text values; fix the nesting',
        ),
    ],
    ids=["not-utf8", "bad-jsonl-line", "bad-json", "csv-unclosed-quote", "blank-lines", "nested-too-deep"],
)
def test_a_file_that_cannot_be_read_names_the_line_and_the_fix(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    assert refusal(path) == message.format(path=path)


def test_a_directory_is_named_as_one(tmp_path):
    assert refusal(tmp_path) == (
        f"prompt file {tmp_path} is a directory: set data.prompts.init_args.path to a file in it "
        "(.jsonl, .json, .csv, .parquet)"
    )


@pytest.mark.parametrize("name", ["p.jsonl", "p.csv"])
def test_a_byte_order_mark_is_read_past(tmp_path, name):
    """Spreadsheet exports start with one; the CSV's first column was read as '\\ufeffprompt' (row 0 'has no prompt')."""
    path = tmp_path / name
    text = '{"prompt": "1+1?", "answer": "2"}\n' if name.endswith("jsonl") else "prompt,answer\n1+1?,2\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert FilePrompts(str(path)).load() == [Problem("1+1?", "2")]


def test_a_question_with_two_gold_answers_is_refused(tmp_path):
    rows = [{"prompt": "2+2?", "answer": "4"}, {"prompt": "3+3?", "answer": "6"}, {"prompt": "2+2?", "answer": "5"}]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    assert refusal(path) == (
        f"rows 0 and 2 of {path} ask the same question ('2+2?') with different gold answers ('4', '5'): keep the "
        "right one"
    )
    path = write_jsonl(tmp_path / "p.jsonl", [*rows[:2], rows[0]])  # a repeat of the same answer is kept
    assert [p.answer for p in FilePrompts(str(path)).load()] == ["4", "6", "4"]
