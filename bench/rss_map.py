#!/usr/bin/env python3
"""rss_map.py: where a process's resident memory is, by mapping, from /proc/PID/smaps.

  rss_map.py PID [--label NAME] [--json OUT] [--top 8]

Splits Rss (what VmRSS counts) into:
  private anonymous    heap, thread stacks, anonymous mmaps (malloc arenas): memory only this
                       process has, what grows with load
  private file-backed  pages of mapped files this process wrote to (relocated .data, .bss,
                       GOT/RELRO of the binary and each library): also its own
  shared file-backed   clean pages of the binary and the shared libraries (code, read-only data):
                       the same physical pages as every other process mapping the same file, so
                       they cost a node once, however many processes use them; VmRSS still counts
                       them in full for each process
and shows Pss (each shared page divided by the processes sharing it), then the largest mappings by
Rss. Prints a Markdown table row set (and JSON with --json) for docs/benchmarks.md.
"""

import argparse
import json
import sys


def read_smaps(pid):
    maps, cur = [], None
    with open("/proc/%s/smaps" % pid, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0] and not parts[0].endswith(":"):
                cur = {"name": parts[5] if len(parts) > 5 else "[anonymous]", "perms": parts[1],
                       "inode": parts[4]}
                maps.append(cur)
            elif parts[0].endswith(":") and len(parts) >= 2 and parts[1].isdigit() and cur:
                cur[parts[0][:-1]] = int(parts[1])  # kB
    return maps


def classify(m):
    name = m["name"]
    file_backed = m["inode"] != "0" and name.startswith("/")
    if not file_backed:
        return "anon"
    return "file"


def summarise(maps, top):
    kb = {"anon_private": 0, "file_private": 0, "file_shared": 0, "anon_shared": 0}
    pss = 0
    by_name = {}
    for m in maps:
        rss = m.get("Rss", 0)
        priv = m.get("Private_Clean", 0) + m.get("Private_Dirty", 0)
        shared = m.get("Shared_Clean", 0) + m.get("Shared_Dirty", 0)
        pss += m.get("Pss", 0)
        if classify(m) == "anon":
            kb["anon_private"] += priv
            kb["anon_shared"] += shared
        else:
            # a file page this process dirtied is its own; a clean one is the file's (page cache)
            kb["file_private"] += m.get("Private_Dirty", 0)
            kb["file_shared"] += m.get("Private_Clean", 0) + shared
        key = m["name"].rsplit("/", 1)[-1]
        by_name[key] = by_name.get(key, 0) + rss
    total = sum(m.get("Rss", 0) for m in maps)
    largest = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
    return {"rss_kib": total, "pss_kib": pss, "anon_private_kib": kb["anon_private"],
            "anon_shared_kib": kb["anon_shared"], "file_private_kib": kb["file_private"],
            "file_shared_kib": kb["file_shared"],
            "largest": [{"mapping": k, "rss_kib": v} for k, v in largest]}


def mib(k):
    return "%.1f" % (k / 1024.0)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pid")
    ap.add_argument("--label", default="")
    ap.add_argument("--json")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)
    s = summarise(read_smaps(args.pid), args.top)
    s["label"] = args.label
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(s, f, indent=1)
            f.write("\n")
    print("| %s | %s | %s | %s | %s | %s |" % (
        args.label or args.pid, mib(s["rss_kib"]), mib(s["anon_private_kib"] + s["anon_shared_kib"]),
        mib(s["file_private_kib"]), mib(s["file_shared_kib"]), mib(s["pss_kib"])))
    print("largest (Rss MiB): " + ", ".join("%s %s" % (e["mapping"], mib(e["rss_kib"]))
                                            for e in s["largest"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
