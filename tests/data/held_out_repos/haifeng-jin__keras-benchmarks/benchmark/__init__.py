"""Shared constants of the benchmarks (the dtype used on the A100 among them) and the command line driver."""

import itertools
import sys

NUM_STEPS = 100
NUM_WORDS = 5
FLOAT_A100 = "bfloat16"

BERT_FIT_BATCH_SIZE = 32
BERT_SEQ_LENGTH = 512

GEMMA_FIT_BATCH_SIZE = 8
GEMMA_BATCH_SIZE = 32
GEMMA_MAX_LENGTH = 50
GEMMA_SEQ_LENGTH = 128

MISTRAL_FIT_BATCH_SIZE = 8
MISTRAL_BATCH_SIZE = 32
MISTRAL_MAX_LENGTH = 50
MISTRAL_SEQ_LENGTH = 128


def benchmark(run):
    if len(sys.argv) not in (2, 3):
        print("Usage: python bert/fit.py <file_path> [batch_size]")
        return
    per_step = run(batch_size=int(sys.argv[2])) if len(sys.argv) == 3 else run()
    with open(sys.argv[1], "a") as file:
        file.write(f"{per_step} ms/step\n")


def get_prompts(num_prompts, num_words):
    words = "I you get take it of for from can not do use would yes".split()
    combinations = itertools.product(words, repeat=num_words)
    return [" ".join(next(combinations)) for _ in range(num_prompts)]
