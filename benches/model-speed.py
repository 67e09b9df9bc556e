"""Speed and memory of one GGUF model with llama.cpp (llama-cpp-python), on this machine.

    python benches/model-speed.py GGUF THREADS [PROMPT_TOKENS] [GEN_TOKENS]

Run it with the model server's python (scripts/model-env.sh, first line); benches/model-speed.sh
runs it for every model and thread count and prints the table. Prints one JSON line:
prompt processing and generation tokens/s, the time to first token of a PROMPT_TOKENS
(default 1500) prompt, the process's resident memory (peak and after the run), and how many
cores the rest of the machine kept busy meanwhile (a shared CPU makes a run slower).

The prompt is examples/knowledge's documentation (as the gateway's context would be), cut to
PROMPT_TOKENS tokens; generation then decodes GEN_TOKENS (default 64) tokens greedily, one
at a time, as a server streams them. n_threads and n_threads_batch are both THREADS, and
only the last token's logits are computed (the server's --logits_all false).
"""

import json
import os
import pathlib
import sys
import time

import llama_cpp


def rss_kib(field):
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_jiffies():
    """(busy jiffies of the whole machine, of this process)"""
    fields = [int(x) for x in pathlib.Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    own = pathlib.Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return busy, int(own[11]) + int(own[12])  # utime + stime


def main():
    gguf, threads = sys.argv[1], int(sys.argv[2])
    n_prompt = int(sys.argv[3]) if len(sys.argv) > 3 else 1500
    n_gen = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    root = pathlib.Path(__file__).resolve().parent.parent / "examples" / "knowledge" / "docs"
    text = "\n\n".join(p.read_text() for p in sorted(root.rglob("*.md")))

    started = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=gguf,
        n_ctx=n_prompt + n_gen + 16,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=False,
        verbose=False,
    )
    load_s = time.perf_counter() - started
    tokens = llm.tokenize(text.encode(), add_bos=True)
    if len(tokens) < n_prompt:
        sys.exit(f"the documentation has only {len(tokens)} tokens")
    tokens = tokens[:n_prompt]

    busy0, own0 = cpu_jiffies()
    started = time.perf_counter()
    llm.eval(tokens)
    token = llm.sample(temp=0.0)
    prompt_s = time.perf_counter() - started
    llm.eval([token])
    ttft_s = time.perf_counter() - started  # the first token, sampled and decoded

    started = time.perf_counter()
    for _ in range(n_gen - 1):
        token = llm.sample(temp=0.0)
        llm.eval([token])
    gen_s = time.perf_counter() - started
    busy1, own1 = cpu_jiffies()
    # Cores the rest of the machine kept busy meanwhile: a run that shared the CPU is slower.
    others = (busy1 - busy0 - (own1 - own0)) / os.sysconf("SC_CLK_TCK") / (ttft_s + gen_s)

    print(
        json.dumps(
            {
                "model": os.path.basename(gguf),
                "threads": threads,
                "load_s": round(load_s, 2),
                "prompt_tokens": n_prompt,
                "prompt_tok_s": round(n_prompt / prompt_s, 1),
                "ttft_s": round(ttft_s, 2),
                "gen_tok_s": round((n_gen - 1) / gen_s, 1),
                "rss_mib": rss_kib("VmRSS") // 1024,
                "peak_rss_mib": rss_kib("VmHWM") // 1024,
                "file_mib": os.path.getsize(gguf) // (1024 * 1024),
                "other_cores_busy": round(max(others, 0.0), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
