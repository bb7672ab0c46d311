#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run llama-benchy against the endpoint, offline and with the API key off every command line.

llama-benchy (PyPI, 0.4.0) takes the key only as ``--api-key``, which any user of the
machine can read in /proc/<pid>/cmdline. This wrapper reads it from the environment
(SPARKOPS_BENCH_API_KEY, unset before llama-benchy starts) or a file (``--api-key-file``,
mode 0600, what roles/bench uses) and hands it to llama-benchy in-process, through
``sys.argv``: the process's command line stays this file's.

Two more things llama-benchy would fetch from the Internet are supplied locally:
- its corpus (a book it downloads and caches under ``$HOME/.cache/llama-benchy/<md5 of
  the URL>.txt``): ``--corpus FILE`` seeds that cache in a private HOME, under a URL that
  names the file's digest, so nothing is downloaded;
- its tokenizer (a Hugging Face name or a tokenizer.json): ``--tokenizer FILE`` is the
  served model's tokenizer.json; ``--word-tokenizer`` builds one that counts words as the
  lab's stand-in does (it has no tokenizer of its own).

Everything after ``--`` is passed to llama-benchy as is.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from pathlib import Path

KEY_ENV = "SPARKOPS_BENCH_API_KEY"


def seed_corpus(home: Path, corpus: Path) -> str:
    """The book URL whose cache entry is the corpus (llama-benchy's corpus.py cache layout)."""
    text = corpus.read_text(encoding="utf-8")
    url = f"sparkops-corpus:sha256:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"
    cache = home / ".cache" / "llama-benchy"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / f"{hashlib.md5(url.encode()).hexdigest()}.txt").write_text(text, encoding="utf-8")
    return url


def word_tokenizer(corpus: Path, target: Path) -> Path:
    """A word-level tokenizer.json over the corpus: one token per whitespace-separated word."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415 (the bench venv's)

    words = sorted(set(re.split(r"\s+", corpus.read_text(encoding="utf-8"))) - {""})
    vocab = {"[UNK]": 0} | {word: index for index, word in enumerate(words, start=1)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with one space
    tokenizer.save(str(target))
    return target


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="a private directory (its HOME)")
    parser.add_argument("--corpus", type=Path, help="a UTF-8 text to draw prompts from")
    parser.add_argument("--api-key-file", type=Path, help=f"a file holding the API key (else {KEY_ENV})")
    tokenizer = parser.add_mutually_exclusive_group(required=True)
    tokenizer.add_argument("--tokenizer", type=Path, help="the served model's tokenizer.json")
    tokenizer.add_argument("--word-tokenizer", action="store_true", help="count words (the lab's stand-in)")
    parser.add_argument("benchy", nargs=argparse.REMAINDER, help="-- then llama-benchy's own arguments")
    args = parser.parse_args(argv)
    benchy = args.benchy[1:] if args.benchy[:1] == ["--"] else args.benchy
    if any(arg == "--api-key" or arg.startswith("--api-key=") for arg in benchy):
        parser.error(f"pass the API key in {KEY_ENV}, never on the command line")
    if args.word_tokenizer and args.corpus is None:
        parser.error("--word-tokenizer needs --corpus (its vocabulary)")

    home = args.workdir.resolve()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ["HOME"] = str(home)  # llama-benchy's cache (os.path.expanduser) and nothing else
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    extra: list[str] = []
    if args.corpus is not None:
        extra += ["--book-url", seed_corpus(home, args.corpus)]
    path = word_tokenizer(args.corpus, home / "tokenizer.json") if args.word_tokenizer else args.tokenizer
    extra += ["--tokenizer", str(path)]
    key = os.environ.pop(KEY_ENV, "")
    if args.api_key_file is not None:
        key = args.api_key_file.read_text(encoding="utf-8").strip()
    if key:
        extra += ["--api-key", key]

    # Imported after HOME and the environment are set: llama-benchy reads them.
    from llama_benchy.__main__ import main as benchy_main  # noqa: PLC0415

    sys.argv = ["llama-benchy", *benchy, *extra]
    try:
        benchy_main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
