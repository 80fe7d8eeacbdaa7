#!/usr/bin/env python3
"""massif_split.py: where the heap goes per connection, from one massif detailed snapshot.

Usage: massif_split.py REST_SNAPSHOT HELD_SNAPSHOT CONNECTIONS

Reads the heap trees of two massif detailed snapshots (valgrind --tool=massif; bench/connections.sh
takes them with `vgdb detailed_snapshot` at rest and while the connections are held), and prints
per top-level allocation site what it grew by, divided by the number of connections, for every
site that grew by at least 256 bytes per connection (the site named by its innermost known
function, or its library). A line for the rest of the growth and the total close the list. Used
by bench/connections.sh MASSIF=1.
"""
import re
import sys

NODE = re.compile(r"^( *)n(\d+): (\d+) (.*)$")


def site_name(text):
    """'0x48F4F5B: gnutls_init (in /usr/lib/.../libgnutls.so.30)' -> 'gnutls_init (libgnutls)'."""
    m = re.match(r"0x[0-9A-Fa-f]+: (\S+)(?: \(in (\S+)\)| \((\S+?):\d+\))?", text)
    if not m:
        return text.strip()
    fn, lib = m.group(1), (m.group(2) or m.group(3) or "")
    lib = re.sub(r"\.so.*$", "", lib.rsplit("/", 1)[-1])
    return f"{fn} ({lib})" if fn != "???" else f"{lib or 'unknown'}"


def last_tree(lines):
    """The lines of the last heap tree in the file (after the last 'heap_tree=detailed')."""
    start = None
    for i, line in enumerate(lines):
        if line.startswith("heap_tree=detailed"):
            start = i + 1
    if start is None:
        sys.exit("massif_split.py: no detailed snapshot in the file")
    tree = []
    for line in lines[start:]:
        if line.startswith("#") or line.startswith("snapshot="):
            break
        tree.append(line.rstrip("\n"))
    return tree


def sites(path):
    """{site address text: bytes} for the root's direct children, and the root's total."""
    with open(path, encoding="utf-8", errors="replace") as f:
        tree = last_tree(f.readlines())
    out = {}
    for line in tree[1:]:
        m = NODE.match(line)
        if m and len(m.group(1)) == 1 and not m.group(4).startswith("in "):
            out[m.group(4)] = out.get(m.group(4), 0) + int(m.group(3))
    return out, int(NODE.match(tree[0]).group(3))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    conns = int(sys.argv[3])
    rest, rest_total = sites(sys.argv[1])
    held, held_total = sites(sys.argv[2])
    grown = held_total - rest_total
    rows, shown = [], 0
    for site, size in held.items():
        delta = size - rest.get(site, 0)
        if delta >= 256 * conns:
            rows.append((delta, site_name(site)))
            shown += delta
    for delta, name in sorted(rows, reverse=True):
        print(f"  {delta / conns:8.0f} B/conn  {delta:>10,} B  {name}")
    print(f"  {(grown - shown) / conns:8.0f} B/conn  {grown - shown:>10,} B  everything else")
    print(f"  {grown / conns:8.0f} B/conn  {grown:>10,} B  heap growth in all ({conns} connections)")


if __name__ == "__main__":
    main()
