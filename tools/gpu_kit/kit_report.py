#!/usr/bin/env python3
"""The GPU kit's report: $OUT/gpu-report.md and $OUT/gpu-report.json, written as the run goes.

  kit_report.py begin   --out OUT --work WORK --device D --env FILE   the header: kit, machine,
                        the CUDA libraries found, `ftune doctor`
  kit_report.py add     --out OUT --stages DIR --stage NAME --rc RC --seconds S --limit L
                        one finished (or killed) stage: its section in the markdown, its entry in
                        the JSON (rewritten atomically), from STAGES/NAME.json as far as it got
  kit_report.py summary --out OUT    the short table of every stage, printed and appended

Standard library only.
"""
import argparse
import json
import os
import sys


def load(path, default):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def save_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def append_md(out, text):
    with open(os.path.join(out, "gpu-report.md"), "a") as f:
        f.write(text)


def cell(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.3g" % v
    return str(v).replace("|", "\\|").replace("\n", " ")


def rows_markdown(rows):
    """A table of the rows' scalar fields; their lists and objects as lines below it. Rows with a
    "table" field make one table per value (a stage's families), each under its name."""
    if any("table" in r for r in rows):
        names = list(dict.fromkeys(r.get("table", "") for r in rows))
        return "".join("### %s\n\n%s" % (n or "other", rows_markdown(
            [{k: v for k, v in r.items() if k != "table"} for r in rows if r.get("table", "") == n]))
            for n in names)
    if not rows:
        return ""
    keys = []
    for r in rows:
        keys += [k for k, v in r.items() if k not in keys and not isinstance(v, (list, dict))]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    extra = []
    for r in rows:
        lines.append("| " + " | ".join(cell(r.get(k)) for k in keys) + " |")
        label = " ".join(str(r[k]) for k in keys[:2] if k in r)
        for k, v in r.items():
            if isinstance(v, dict):
                extra.append("- %s, %s: %s" % (label, k, "; ".join("%s (%s)" % kv for kv in v.items())))
            elif isinstance(v, list) and k == "output":
                extra.append("- %s:\n\n```\n%s\n```" % (label, "\n".join(v)))
            elif isinstance(v, list):
                extra += ["- %s, %s: %s" % (label, k, cell(x)) for x in v]
    return "\n".join(lines) + "\n\n" + ("\n".join(extra) + "\n\n" if extra else "")


def begin(a):
    os.makedirs(a.out, exist_ok=True)
    info = load(os.path.join(a.work, "kit.json"), {})
    env = load(a.env, {}) if a.env else {}
    build = info.get("build", {})
    md = ["# ftune GPU kit report\n",
          "Kit: ftune %s%s, built %s (%s; CUDA archs %s); run on %s.\n" % (
              build.get("commit", "?"), " (uncommitted changes)" if build.get("dirty") else "",
              build.get("date", "?"), build.get("compiler", "?"), build.get("cuda_archs", "?"),
              "the GPU" if a.device != "cpu" else "the CPU only (selfcheck)")]
    if env.get("gpu"):
        md.append("GPU: %s\n" % env["gpu"])
    if env.get("libraries"):
        md.append("Libraries this machine provides (CUDA's, the driver's; the C++ runtime used):\n\n"
                  "| library | path |\n|---|---|\n" +
                  "".join("| %s | %s |\n" % (k, v) for k, v in env["libraries"].items()))
    for key, title in (("nvidia_smi", "nvidia-smi"), ("doctor", "ftune doctor")):
        if env.get(key):
            md.append("<details><summary>%s</summary>\n\n```\n%s\n```\n</details>\n" % (title, env[key]))
    with open(os.path.join(a.out, "gpu-report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    save_json(os.path.join(a.out, "gpu-report.json"),
              {"kit": {k: info.get(k) for k in ("build", "features", "device_libs", "glibc")},
               "device": a.device, "environment": env, "stages": []})
    return 0


def add(a):
    doc = load(os.path.join(a.stages, a.stage + ".json"),
               {"stage": a.stage, "status": "running", "headline": "", "rows": [], "notes": []})
    status = doc.get("status", "running")
    if a.rc in (124, 137):
        status = "timeout"
        doc["headline"] = ("killed at its %ds limit; " % a.limit) + (doc.get("headline") or
                                                                     "%d rows done" % len(doc["rows"]))
    elif status == "running":
        status = "fail"
        doc["headline"] = "stopped (exit %d) before it finished; %d rows done" % (a.rc, len(doc["rows"]))
    elif a.rc != 0 and status in ("ok", "skipped"):
        status = "fail"
    doc.update({"status": status, "seconds": round(a.seconds, 1), "limit_s": a.limit, "exit": a.rc})
    report = os.path.join(a.out, "gpu-report.json")
    j = load(report, {"stages": []})
    j["stages"] = [s for s in j["stages"] if s.get("stage") != a.stage] + [doc]
    save_json(report, j)
    md = "## %s: %s (%.0f s of %d)\n\n%s\n\n" % (a.stage, status, a.seconds, a.limit,
                                                 doc.get("headline", ""))
    md += rows_markdown(doc.get("rows", []))
    md += "".join("- %s\n" % n for n in doc.get("notes", [])) + ("\n" if doc.get("notes") else "")
    append_md(a.out, md)
    return 0


def summary(a):
    j = load(os.path.join(a.out, "gpu-report.json"), {"stages": []})
    rows = [(s["stage"], s["status"], "%.0f/%ds" % (s.get("seconds", 0), s.get("limit_s") or 0),
             s.get("headline", "")) for s in j["stages"]]
    width = [max([len(r[i]) for r in rows] + [len(h)]) for i, h in enumerate(("stage", "status", "time"))]
    lines = ["%-*s  %-*s  %-*s  %s" % (width[0], "stage", width[1], "status", width[2], "time", "result")]
    lines += ["%-*s  %-*s  %-*s  %s" % (width[0], r[0], width[1], r[1], width[2], r[2], r[3][:150])
              for r in rows]
    failed = [r[0] for r in rows if r[1] not in ("ok", "skipped")]
    lines.append("gpu kit: %s; report: %s/gpu-report.md" % (
        "all stages ok" if not failed else "FAILED: " + ", ".join(failed), a.out))
    append_md(a.out, "## Summary\n\n```\n%s\n```\n" % "\n".join(lines))
    print("\n".join(lines))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["begin", "add", "summary"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--env")
    ap.add_argument("--stages")
    ap.add_argument("--stage")
    ap.add_argument("--rc", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    return {"begin": begin, "add": add, "summary": summary}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
