//! `/proc/kallsyms`: the kernel's symbol table. Only text (function)
//! symbols matter here: they are what kprobes and fentry attach to.

use std::collections::BTreeSet;

/// Function names from a kallsyms text (`ADDR TYPE NAME [MODULE]`), with
/// compiler suffixes (`.constprop.0`, `.isra.0`, `.cold`) kept: they are
/// distinct symbols and kprobes take them as such. JIT-compiled BPF
/// programs and trampolines (module `[bpf]`) are left out: they come and
/// go with every program loaded and are nothing to attach to.
pub fn text_symbols(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let _addr = it.next()?;
            let ty = it.next()?;
            let name = it.next()?;
            let bpf = it.next() == Some("[bpf]");
            (matches!(ty, "t" | "T") && !bpf).then(|| name.to_owned())
        })
        .collect()
}

/// The running kernel's function symbols.
pub fn read() -> std::io::Result<BTreeSet<String>> {
    Ok(text_symbols(&std::fs::read_to_string("/proc/kallsyms")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_text_symbols_only() {
        let s = text_symbols(
            "ffffffff81000000 T _stext\n\
             ffffffff81001000 t ip_rcv_core\n\
             ffffffff82000000 D jiffies\n\
             ffffffff82000000 r __ksymtab_x\n\
             ffffffffc0000000 t veth_xmit\t[veth]\n\
             ffffffffc0025f40 t bpf_prog_6deef7357e7b4530_x\t[bpf]\n\
             garbage\n",
        );
        let v: Vec<_> = s.iter().map(String::as_str).collect();
        assert_eq!(v, ["_stext", "ip_rcv_core", "veth_xmit"]);
    }
}
