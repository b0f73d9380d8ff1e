#!/usr/bin/env python3
"""Writes every frame of the given pcap/pcapng files as a fuzz seed in the
parse_packet layout: one link-type selector byte, then the frame.

Usage: seeds.py OUTDIR FILE...  (unknown link types and unreadable files are
skipped; standard library only)."""
import hashlib, os, struct, sys

# pcap LINKTYPE -> index in fuzz_targets/parse_packet.rs LINKS.
SELECTOR = {1: 0, 12: 1, 14: 1, 101: 1, 228: 2, 229: 3, 113: 4, 276: 5, 0: 6, 108: 6}


def frames(data):
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = "<" if magic[0] in (0xD4, 0x4D) else ">"
        lt = struct.unpack(e + "I", data[20:24])[0] & 0x0FFFFFFF
        o = 24
        while o + 16 <= len(data):
            incl = struct.unpack(e + "I", data[o + 8:o + 12])[0]
            yield lt, data[o + 16:o + 16 + incl]
            o += 16 + incl
        return
    o, e, links = 0, "<", []
    while o + 12 <= len(data):
        if data[o:o + 4] == b"\x0a\x0d\x0d\x0a":
            e = "<" if data[o + 8:o + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            links = []
        btype, blen = struct.unpack(e + "II", data[o:o + 8])
        if blen < 12:
            return
        body = data[o + 8:o + blen - 4]
        if btype == 1:
            links.append(struct.unpack(e + "H", body[:2])[0])
        elif btype == 6 and len(body) >= 20:
            iface, _, _, cap, _ = struct.unpack(e + "IIIII", body[:20])
            if iface < len(links):
                yield links[iface], body[20:20 + cap]
        o += blen


def main():
    out, files = sys.argv[1], sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    n = 0
    for path in files:
        try:
            data = open(path, "rb").read()
            for lt, frame in frames(data):
                if lt in SELECTOR:
                    seed = bytes([SELECTOR[lt]]) + frame
                    name = hashlib.sha1(seed).hexdigest()
                    with open(os.path.join(out, name), "wb") as f:
                        f.write(seed)
                    n += 1
        except (OSError, struct.error, IndexError):
            continue
    print("seeds.py: %d seeds from %d files" % (n, len(files)))


if __name__ == "__main__":
    main()
