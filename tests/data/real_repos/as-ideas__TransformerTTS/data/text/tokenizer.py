from phonemizer.phonemize import phonemize


class Phonemizer:
    def __init__(self, language: str, with_stress: bool, njobs=4):
        self.language, self.with_stress, self.njobs = language, with_stress, njobs

    def __call__(self, text):
        return phonemize(text, language=self.language, backend="espeak", strip=True, with_stress=self.with_stress, njobs=self.njobs)


class Tokenizer:
    def __init__(self, symbols="abcdefghijklmnopqrstuvwxyz ", add_start_end=True):
        self.idx_to_token = {i: s for i, s in enumerate(symbols, start=1)}
        self.token_to_idx = {s: i for i, s in self.idx_to_token.items()}
        self.vocab_size = len(symbols) + 1

    def __call__(self, sentence):
        return [self.token_to_idx[c] for c in sentence if c in self.token_to_idx]
