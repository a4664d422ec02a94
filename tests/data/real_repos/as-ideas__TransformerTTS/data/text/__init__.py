from typing import Union

from data.text.tokenizer import Phonemizer, Tokenizer


class TextToTokens:
    def __init__(self, phonemizer: Phonemizer, tokenizer: Tokenizer):
        self.phonemizer = phonemizer
        self.tokenizer = tokenizer

    def __call__(self, input_text: Union[str, list]) -> list:
        return self.tokenizer(self.phonemizer(input_text))

    @classmethod
    def default(cls, language: str, add_start_end: bool, with_stress: bool, njobs=1):
        return cls(phonemizer=Phonemizer(language=language, njobs=njobs, with_stress=with_stress), tokenizer=Tokenizer(add_start_end=add_start_end))
