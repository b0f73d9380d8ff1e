#!/usr/bin/env python3
"""Writes fuzz seeds for one target (standard library only):

  seeds.py parse_packet OUTDIR FILE...  every frame of the captures: one
                                        link-type selector byte + the frame
  seeds.py pipeline OUTDIR FILE...      each capture's first 16 KiB behind a
                                        knobs byte (three knob settings)
  seeds.py config_text OUTDIR FILE...   the TOML files as they are
  seeds.py l7_trackers OUTDIR           built here: a TLS and a DNS exchange
  seeds.py l7_parsers OUTDIR FILE...    the captures' TCP/UDP payloads: each
                                        hello, DNS message and QUIC long
                                        header behind its parser's mode byte,
                                        and each capture's first 32 payloads
                                        as one engine segment sequence

Unknown link types and unreadable files are skipped."""
import hashlib, os, struct, sys

# pcap LINKTYPE -> index in fuzz_targets/parse_packet.rs LINKS.
SELECTOR = {1: 0, 12: 1, 14: 1, 101: 1, 228: 2, 229: 3, 113: 4, 276: 5, 0: 6, 108: 6}
# pipeline.rs knobs: big tables/long timeouts, tiny tables/short timeouts
# with NPM, tiny tables without NPM.
KNOBS = (0x0F | 0x30, 0x40, 0xC1)
PIPELINE_BYTES = 16 * 1024


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


def write(out, seed):
    with open(os.path.join(out, hashlib.sha1(seed).hexdigest()), "wb") as f:
        f.write(seed)


def segment(direction, flags, seq, ack, step_ms, payload, fin=False):
    step = (step_ms << 1 | int(fin)) & 0xFFFF
    head = bytes([(flags & 0xFE) | direction]) + struct.pack(">IIH", seq, ack, step)
    return head + bytes([len(payload)]) + payload


def l7_seeds():
    syn, ack, psh_ack, syn_ack = 0x02, 0x10, 0x18, 0x12
    hello = bytes([22, 3, 1, 0, 4]) + b"\x01\x00\x00\x00"
    app = bytes([23, 3, 3, 0, 6]) + b"secret"
    tls = b"\x00" + b"".join([
        segment(0, syn, 100, 0, 0, b""),
        segment(1, syn_ack, 900, 101, 5, b""),
        segment(0, ack, 101, 901, 5, b""),
        segment(0, psh_ack, 101, 901, 1, hello),
        segment(1, psh_ack, 901, 101 + len(hello), 7, hello),
        segment(0, psh_ack, 101 + len(hello), 901 + len(hello), 1, app),
        segment(1, psh_ack, 901 + len(hello), 101 + len(hello) + len(app), 20, app),
        segment(1, psh_ack, 901 + len(hello), 101 + len(hello) + len(app), 200, app),
        segment(0, ack | 0x01, 101 + len(hello) + len(app), 0, 1, b"", fin=True),
    ])
    query = b"\x12\x34\x01\x00" + b"\x00" * 8
    answer = b"\x12\x34\x81\x80" + b"\x00" * 8
    dns = b"\x01" + b"".join([
        segment(0, 0, 0, 0, 0, query),
        segment(0, 0, 0, 0, 1, query),
        segment(1, 0, 0, 0, 3, answer),
        segment(1, 0, 0, 0, -2, answer),
    ])
    return [tls, dns]


def l4_payload(lt, frame):
    """(is_udp, sport, dport, payload) of an Ethernet or raw IP frame."""
    if lt == 1:
        o, etype = 14, struct.unpack(">H", frame[12:14])[0]
        while etype in (0x8100, 0x88A8):
            etype, o = struct.unpack(">H", frame[o + 2:o + 4])[0], o + 4
        ip = frame[o:] if etype in (0x0800, 0x86DD) else b""
    elif lt in (12, 14, 101, 228, 229):
        ip = frame
    else:
        return None
    if ip[:1] and ip[0] >> 4 == 4:
        proto, ip = ip[9], ip[(ip[0] & 15) * 4:]
    elif ip[:1] and ip[0] >> 4 == 6:
        proto, ip = ip[6], ip[40:]
    else:
        return None
    if proto == 17 and len(ip) >= 8:
        return True, *struct.unpack(">HH", ip[:4]), ip[8:]
    if proto == 6 and len(ip) >= 20:
        return False, *struct.unpack(">HH", ip[:4]), ip[(ip[12] >> 4) * 4:]
    return None


def l7_parser_seeds(data):
    """Seeds for fuzz_targets/l7_parsers.rs from one capture."""
    seeds, segs = [], []
    for lt, frame in frames(data):
        got = l4_payload(lt, frame)
        if not got or not got[3]:
            continue
        udp, sport, dport, p = got
        if not udp and len(p) > 9 and p[0] == 22 and p[5] in (1, 2):
            seeds.append(bytes([p[5] - 1]) + p[9:])
        elif udp and 53 in (sport, dport):
            seeds.append(b"\x03" + p)
        elif udp and p[0] & 0xC0 == 0xC0:
            seeds.append(b"\x04" + p)
        if len(segs) < 32:
            # flags: direction (server port the lower), UDP; seq step = the
            # previous payload's length, 1 ms apart, payload cut to 255 bytes.
            flags = int(sport < dport) | int(udp) << 1
            step = 0 if udp or not segs else segs[-1][1]
            cut = p[:255]
            segs.append((struct.pack(">BhHB", flags, min(step, 32767), 1000, len(cut)) + cut, len(cut)))
    if segs:
        seeds.append(b"\x05" + b"".join(s for s, _ in segs))
    return seeds


def main():
    target, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    n = 0
    if target == "l7_trackers":
        for s in l7_seeds():
            write(out, s)
            n += 1
    for path in files:
        try:
            data = open(path, "rb").read()
            if target == "parse_packet":
                for lt, frame in frames(data):
                    if lt in SELECTOR:
                        write(out, bytes([SELECTOR[lt]]) + frame)
                        n += 1
            elif target == "pipeline":
                for k in KNOBS:
                    write(out, bytes([k]) + data[:PIPELINE_BYTES])
                    n += 1
            elif target == "l7_parsers":
                for seed in l7_parser_seeds(data):
                    write(out, seed)
                    n += 1
            elif target == "config_text":
                write(out, data)
                n += 1
        except (OSError, struct.error, IndexError):
            continue
    print("seeds.py: %s: %d seeds from %d files" % (target, n, len(files)))


if __name__ == "__main__":
    main()
