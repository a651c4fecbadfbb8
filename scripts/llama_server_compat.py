#!/usr/bin/env python3
"""A llama-server stand-in for llama.cpp's server test suite: takes llama-server's flags,
maps the model flags (--hf-repo / --hf-file / -m / --model-url) to local files, translates
the flags `specdec serve` has, prints each flag it drops (with the reason), and execs
`specdec serve`.

usage: llama_server_compat.py [llama-server flags...]

environment:
  SD_COMPAT_SERVER   the binary to exec (default: build-release/specdec beside this
                     script's repository). A binary named llama-server* gets the flags as
                     they are, only the model flags mapped (the baseline run).
  SD_COMPAT_MODELS   the folder of the local models (default: build-release/suite-models),
                     made by scripts/llama_server_suite.sh: stories260K.gguf (llama2.c's
                     stories260K converted by `specdec convert`).

--spec-synth-rates / --spec-synth-len (synthetic acceptance) with a draft: the draft becomes
the target itself, said in one line (specdec's forced rejections keep the text exact, so
only a draft that agrees with the target lets the rates alone decide acceptance).

No model flag (llama-server's router mode, which specdec does not have): specdec serves
stories260K.gguf alone, said in one line (the suite's router-mode CORS cases check the HTTP
layer only); a llama-server baseline exits 1 there.

The suite's Hugging Face models map as follows (anything else: exit 1, naming it):
  ggml-org/test-model-stories260K, ggml-org/models tinyllamas/stories260K.gguf
      -> stories260K.gguf (the same checkpoint the suite downloads, converted locally)
  ggml-org/test-model-stories260K-infill (test_infill's FIM model)
      -> models/downloaded/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (a FIM vocabulary:
         <|fim_prefix|>, <|repo_name|>, <|file_sep|> ...; the suite's two text cases expect
         the stories model's words and fail with it)
  ggml-org/stories15M_MOE (test_speculative's target)
      -> models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf where it is (its draft,
         models/smollm2-draft-q8_0.gguf, is put where the suite looks for
         stories15M-q4_0.gguf), else models/tinystories-target-f32.gguf (the project's
         1M-parameter TinyStories target, with models/tinystories-draft-q8_0.gguf)
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# test_speculative's target: SmolLM2-135M where models/downloaded has it (a BPE vocabulary of
# 49,152 tokens, where the suite's "Hello " * 248 is 249 tokens, as in stories15M's, and fits
# its 256-token context), else the 1M-parameter TinyStories target (512 tokens: that prompt
# is 746); scripts/llama_server_suite.sh puts the matching draft where the suite looks.
SMOLLM2 = os.path.join(ROOT, "models", "downloaded", "SmolLM2-135M-Instruct.Q4_1.gguf")

# (hf repo without a ":quant" tail, hf file or None) -> local file
HF_MAP = {
    ("ggml-org/test-model-stories260K", None): "stories260K.gguf",
    ("ggml-org/models", "tinyllamas/stories260K.gguf"): "stories260K.gguf",
    ("ggml-org/test-model-stories260K-infill", None): os.path.join(
        ROOT, "models", "downloaded", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    ),
    ("ggml-org/stories15M_MOE", "stories15M_MOE-F16.gguf"): (
        SMOLLM2 if os.path.exists(SMOLLM2) else os.path.join(ROOT, "models", "tinystories-target-f32.gguf")
    ),
}

# llama-server flags specdec serve takes with the same spelling and meaning:
# name -> takes a value
KEEP = {
    "--port": 1, "--host": 1, "--temp": 1, "--seed": 1, "--model": 1, "-m": 1,
    "--model-draft": 1, "-md": 1, "--alias": 1, "--ctx-size": 1, "-c": 1,
    "--parallel": 1, "-np": 1, "--batch-size": 1, "-b": 1, "--threads": 1, "-t": 1,
    "--n-predict": 1, "-n": 1, "--api-key": 1, "--cors-origins": 1, "--chat-template": 1,
    "--kv-unified": 0, "-kvu": 0, "--cont-batching": 0, "--top-k": 1, "--top-p": 1,
    "--timeout": 1, "--threads-http": 1, "--api-key-file": 1, "--slots": 0, "--no-slots": 0,
    "--no-ui": 0, "--jinja": 0, "--no-jinja": 0, "--chat-template-file": 1, "--reasoning": 1,
    "--verbose": 0, "--tags": 1, "--spec-synth-rates": 1, "--spec-synth-len": 1,
    "--context-shift": 0, "--no-context-shift": 0, "--slot-save-path": 1,
}
# renamed: llama-server's name -> specdec's
RENAME = {
    "--spec-draft-n-max": "--draft-max",
    "--draft-max": "--draft-max",
    "--draft": "--draft-max",
    "--spec-draft-n-min": "--draft-min",
    "--draft-min": "--draft-min",
    "-ctk": "--kv-type",
    "--cache-type-k": "--kv-type",
}
# dropped: name -> (takes a value, why)
DROP = {
    "--offline": (0, "models are local files"),
    "--swa-full": (0, "no sliding-window models"),
    "--embedding": (0, "no embeddings"),
    "--reranking": (0, "no reranking"),
    "--no-mmproj": (0, "no multimodal projector"),
    "--no-models-autoload": (0, "no router mode"),
    "--no-cache-idle-slots": (0, "the prefix cache is kept"),
    "--ui-mcp-proxy": (0, "no MCP proxy"),
    "--backend_sampling": (0, "sampling runs on the CPU"),
    "-ctv": (1, "one KV type for K and V (-ctk)"),
    "--cache-type-v": (1, "one KV type for K and V (-ctk)"),
    "--ubatch-size": (1, "no micro-batches: -b is the pass size"),
    "-ub": (1, "no micro-batches: -b is the pass size"),
    "--n-gpu-layers": (1, "the server runs on the CPU"),
    "-ngl": (1, "the server runs on the CPU"),
    "-fa": (1, "attention has one implementation"),
    "--flash-attn": (1, "attention has one implementation"),
    "--pooling": (1, "no embeddings"),
    "--reasoning-format": (1, "no reasoning parser"),
    "--grp-attn-n": (1, "no group attention"),
    "--grp-attn-w": (1, "no group attention"),
    "--lora": (1, "no LoRA adapters"),
    "--sleep-idle-seconds": (1, "no sleep mode"),
    "--cache-ram": (1, "the prefix cache lives in the KV pool"),
    "--media-path": (1, "no multimodal input"),
    "--mmproj-url": (1, "no multimodal projector"),
    "--models-dir": (1, "no router mode"),
    "--models-max": (1, "no router mode"),
    "--models-preset": (1, "no router mode"),
    "--tools": (1, "no built-in tools"),
    "--tools-runtime": (1, "no built-in tools"),
    "--mcp-servers-config": (1, "no MCP servers"),
    "--mcp-servers-json": (1, "no MCP servers"),
}
# llama-server's speculative types -> specdec's draft types (others are dropped)
SPEC_TYPE = {"draft-simple": "llm", "draft": "llm", "ngram-simple": "ngram", "ngram": "ngram"}


def note(msg):
    print(f"llama_server_compat: {msg}", file=sys.stderr, flush=True)


def local_model(repo, hf_file, models_dir):
    repo_base = repo.split(":")[0] if repo else None
    for key in ((repo_base, hf_file), (repo_base, None)):
        if key in HF_MAP:
            path = HF_MAP[key]
            return path if os.path.isabs(path) else os.path.join(models_dir, path)
    return None


def main(argv):
    server = os.environ.get("SD_COMPAT_SERVER", os.path.join(ROOT, "build-release", "specdec"))
    models_dir = os.environ.get("SD_COMPAT_MODELS", os.path.join(ROOT, "build-release", "suite-models"))
    peer = os.path.basename(server).startswith("llama-server")

    # First pass: the model flags.
    hf_repo = hf_file = model = model_url = None
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        v = argv[i + 1] if i + 1 < len(argv) else None
        if a in ("--hf-repo", "-hf", "-hfr"):
            hf_repo, i = v, i + 2
        elif a in ("--hf-file", "-hff"):
            hf_file, i = v, i + 2
        elif a in ("--model", "-m"):
            model, i = v, i + 2
        elif a in ("--model-url", "-mu"):
            model_url, i = v, i + 2
        else:
            rest.append(a)
            i += 1
    if model is None:
        if hf_repo is None and model_url is None and peer:
            note("no model flag (router mode): not run here")
            return 1
        if hf_repo is None and model_url is None:
            # llama-server's router mode (no model: it loads them on demand) is not
            # specdec's; its suite cases that check the HTTP layer (CORS) run against the
            # local stories260K model served alone
            model = os.path.join(models_dir, "stories260K.gguf")
            note(f"no model flag (router mode): no router, serving {model} alone")
        else:
            model = local_model(hf_repo, hf_file, models_dir) if hf_repo else None
            if model is None:
                note(f"no local model for --hf-repo {hf_repo} --hf-file {hf_file} --model-url {model_url}")
                return 1
            note(f"model {hf_repo} {hf_file or ''} -> {model}")
    if not os.path.exists(model):
        note(f"model file {model} does not exist")
        return 1

    if peer:
        args = [server, "--model", model] + rest
        os.execv(server, args)

    out = [server, "serve", "--model", model]
    # llama-server's default: no /metrics unless --metrics
    if "--metrics" not in rest:
        out.append("--no-metrics")
    has_draft = "--model-draft" in rest or "-md" in rest
    # llama-server's synthetic acceptance accepts a draft token on a coin alone, whatever
    # the target says; specdec's forced rejections keep the text exact, so a draft token is
    # accepted only where the target agrees. With the target as its own draft every
    # proposal agrees and the rates alone decide acceptance, as they do in llama-server.
    if has_draft and ("--spec-synth-rates" in rest or "--spec-synth-len" in rest):
        for flag in ("--model-draft", "-md"):
            if flag in rest:
                j = rest.index(flag)
                note(f"synthetic acceptance: draft {rest[j + 1]} -> the target {model} "
                     "(specdec keeps the text exact: a draft token is accepted only where "
                     "the target agrees, so the target drafts for itself and the rates alone "
                     "decide)")
                rest[j + 1] = model
    i = 0
    while i < len(rest):
        a = rest[i]
        v = rest[i + 1] if i + 1 < len(rest) else None
        if a == "--metrics":
            i += 1
        elif a in KEEP:
            out += [a, v] if KEEP[a] else [a]
            i += 1 + KEEP[a]
        elif a in RENAME:
            out += [RENAME[a], v]
            i += 2
        elif a == "--spec-type":
            if has_draft and v in SPEC_TYPE:
                out += ["--draft-type", SPEC_TYPE[v]]
            elif not has_draft:
                note(f"dropped --spec-type {v}: no draft model")
            else:
                note(f"dropped --spec-type {v}: no such draft type")
            i += 2
        elif a in DROP:
            takes, why = DROP[a]
            shown = f"{a} {v}" if takes else a
            note(f"dropped {shown}: {why}")
            i += 1 + takes
        else:
            takes = 1 if v is not None and not v.startswith("-") else 0
            note(f"dropped {a}{' ' + v if takes else ''}: unknown to specdec serve")
            i += 1 + takes
    note("exec " + " ".join(out))
    sys.stdout.flush()
    os.execv(server, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
