//! Disassembler: raw instruction slots → one text line per instruction, in
//! the kernel verifier's own notation (`kernel/bpf/disasm.c`), so listings can
//! be read side by side with a verifier log.
//!
//! Two forms are not the verifier's because they cannot match it anyway: a
//! map load prints `r1 = map[N]` with the `MapId` the assembler left in `imm`
//! (the verifier shows the rewritten kernel pointer), and helper ids beyond
//! the names known here print as `call unknown#N`.

use crate::codegen::asm::opcode::*;

const CLASS_MASK: u8 = 0x07;
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const OP_MASK: u8 = 0xf0;
const SIZE_MASK: u8 = 0x18;
const MODE_MASK: u8 = 0xe0;
const MODE_IMM: u8 = 0x00;
const MODE_MEM: u8 = 0x60;
const JA: u8 = 0x00;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
const NEG: u8 = 0x80;
const END: u8 = 0xd0;

/// Disassembles a whole program, one line per instruction; the second slot of
/// an `ld_imm64` gets no line of its own.
#[cfg(test)]
pub fn disassemble(insns: &[u64]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut at = 0;
    while at < insns.len() {
        let (text, slots) = disassemble_at(insns, at);
        lines.push(text);
        at += slots;
    }
    lines
}

/// Disassembles the instruction starting at slot `at`; returns its text and
/// how many slots it takes (2 for `ld_imm64`, else 1).
pub fn disassemble_at(insns: &[u64], at: usize) -> (String, usize) {
    let f = Fields::decode(insns[at]);
    match f.code & CLASS_MASK {
        ALU | ALU64 => (alu(&f), 1),
        JMP | JMP32 => (jump(&f), 1),
        LDX if f.mode() == MODE_MEM => (
            format!("r{} = *({} *)(r{} {:+})", f.dst, f.size(), f.src, f.off),
            1,
        ),
        ST if f.mode() == MODE_MEM => (
            format!("*({} *)(r{} {:+}) = {}", f.size(), f.dst, f.off, f.imm),
            1,
        ),
        STX if f.mode() == MODE_MEM => (
            format!("*({} *)(r{} {:+}) = r{}", f.size(), f.dst, f.off, f.src),
            1,
        ),
        STX if f.mode() == MODE_ATOMIC => (atomic(&f), 1),
        LD if f.code == LD | MODE_IMM | SIZE_DW => match insns.get(at + 1) {
            Some(&next) => (ld_imm64(&f, next), 2),
            None => (invalid(insns[at]), 1),
        },
        _ => (invalid(insns[at]), 1),
    }
}

/// The fields of one slot, with `off` and `imm` sign-extended.
struct Fields {
    code: u8,
    dst: u8,
    src: u8,
    off: i16,
    imm: i32,
    raw: u64,
}

impl Fields {
    fn decode(raw: u64) -> Self {
        Fields {
            code: raw as u8,
            dst: (raw >> 8) as u8 & 0xf,
            src: (raw >> 12) as u8 & 0xf,
            off: (raw >> 16) as u16 as i16,
            imm: (raw >> 32) as u32 as i32,
            raw,
        }
    }

    fn mode(&self) -> u8 {
        self.code & MODE_MASK
    }

    fn op(&self) -> u8 {
        self.code & OP_MASK
    }

    fn size(&self) -> &'static str {
        match self.code & SIZE_MASK {
            0x00 => "u32",
            0x08 => "u16",
            0x10 => "u8",
            _ => "u64",
        }
    }

    /// Register prefix: `w` for the 32-bit classes.
    fn reg_prefix(&self) -> char {
        match self.code & CLASS_MASK {
            ALU | JMP32 => 'w',
            _ => 'r',
        }
    }
}

fn invalid(raw: u64) -> String {
    format!("invalid {raw:#018x}")
}

fn alu(f: &Fields) -> String {
    let r = f.reg_prefix();
    let op = match f.op() {
        NEG => return format!("{r}{} = -{r}{}", f.dst, f.dst),
        END => return endian(f),
        0x00 => "+=",
        0x10 => "-=",
        0x20 => "*=",
        0x30 => "/=",
        0x40 => "|=",
        0x50 => "&=",
        0x60 => "<<=",
        0x70 => ">>=",
        0x90 => "%=",
        0xa0 => "^=",
        0xb0 => "=",
        0xc0 => "s>>=",
        _ => return invalid(f.raw),
    };
    if f.code & SRC_X != 0 {
        format!("{r}{} {op} {r}{}", f.dst, f.src)
    } else {
        format!("{r}{} {op} {}", f.dst, f.imm)
    }
}

fn endian(f: &Fields) -> String {
    if f.code & CLASS_MASK == ALU64 {
        format!("r{} = bswap{} r{}", f.dst, f.imm, f.dst)
    } else {
        let order = if f.code & SRC_X != 0 { "be" } else { "le" };
        format!("r{} = {order}{} r{}", f.dst, f.imm, f.dst)
    }
}

fn jump(f: &Fields) -> String {
    let is_jmp = f.code & CLASS_MASK == JMP;
    let op = match f.op() {
        CALL => return call(f),
        JA if is_jmp => return format!("goto pc{:+}", f.off),
        JA => return format!("gotol pc{:+}", f.imm),
        EXIT if is_jmp => return "exit".into(),
        0x10 => "==",
        0x20 => ">",
        0x30 => ">=",
        0x40 => "&",
        0x50 => "!=",
        0x60 => "s>",
        0x70 => "s>=",
        0xa0 => "<",
        0xb0 => "<=",
        0xc0 => "s<",
        0xd0 => "s<=",
        _ => return invalid(f.raw),
    };
    let r = f.reg_prefix();
    if f.code & SRC_X != 0 {
        format!("if {r}{} {op} {r}{} goto pc{:+}", f.dst, f.src, f.off)
    } else {
        format!(
            "if {r}{} {op} {:#x} goto pc{:+}",
            f.dst, f.imm as u32, f.off
        )
    }
}

fn call(f: &Fields) -> String {
    // src_reg 1 is a bpf-to-bpf call, 2 a kfunc; both show as the kernel does.
    match f.src {
        0 => match helper_name(f.imm) {
            Some(name) => format!("call bpf_{name}#{}", f.imm),
            None => format!("call unknown#{}", f.imm),
        },
        1 => format!("call pc{:+}", f.imm),
        _ => format!("call kernel-function#{}", f.imm),
    }
}

fn atomic(f: &Fields) -> String {
    let (size, base, off, src) = (f.size(), f.dst, f.off, f.src);
    let bits = if f.code & SIZE_MASK == SIZE_DW {
        "64"
    } else {
        ""
    };
    let op = match f.imm & !FETCH {
        0x00 => ("+=", "add"),
        0x40 => ("|=", "or"),
        0x50 => ("&=", "and"),
        0xa0 => ("^=", "xor"),
        _ => ("", ""),
    };
    match f.imm {
        0x00 | 0x40 | 0x50 | 0xa0 => format!("lock *({size} *)(r{base} {off:+}) {} r{src}", op.0),
        0x01 | 0x41 | 0x51 | 0xa1 => format!(
            "r{src} = atomic{bits}_fetch_{}(({size} *)(r{base} {off:+}), r{src})",
            op.1
        ),
        XCHG => format!("r{src} = atomic{bits}_xchg(({size} *)(r{base} {off:+}), r{src})"),
        CMPXCHG => format!("r0 = atomic{bits}_cmpxchg(({size} *)(r{base} {off:+}), r0, r{src})"),
        _ => invalid(f.raw),
    }
}

fn ld_imm64(f: &Fields, next: u64) -> String {
    let value = u64::from(f.imm as u32) | (next & 0xffff_ffff_0000_0000);
    if f.src == PSEUDO_MAP_FD {
        format!("r{} = map[{value}]", f.dst)
    } else if f.src == PSEUDO_MAP_VALUE {
        format!("r{} = &map[{}].value + {}", f.dst, f.imm as u32, next >> 32)
    } else if f.src == PSEUDO_FUNC {
        format!("r{} = &function(pc{:+})", f.dst, f.imm)
    } else {
        format!("r{} = {value:#x}", f.dst)
    }
}

fn helper_name(id: i32) -> Option<&'static str> {
    let id = usize::try_from(id).ok()?;
    HELPER_NAMES.split_whitespace().nth(id)
}

/// `BPF_FUNC_*` names in id order, from `__BPF_FUNC_MAPPER` in the UAPI
/// `linux/bpf.h` (Linux 6.2).
const HELPER_NAMES: &str = "\
    unspec map_lookup_elem map_update_elem map_delete_elem probe_read ktime_get_ns trace_printk \
    get_prandom_u32 get_smp_processor_id skb_store_bytes l3_csum_replace l4_csum_replace \
    tail_call clone_redirect get_current_pid_tgid get_current_uid_gid get_current_comm \
    get_cgroup_classid skb_vlan_push skb_vlan_pop skb_get_tunnel_key skb_set_tunnel_key \
    perf_event_read redirect get_route_realm perf_event_output skb_load_bytes get_stackid \
    csum_diff skb_get_tunnel_opt skb_set_tunnel_opt skb_change_proto skb_change_type \
    skb_under_cgroup get_hash_recalc get_current_task probe_write_user \
    current_task_under_cgroup skb_change_tail skb_pull_data csum_update set_hash_invalid \
    get_numa_node_id skb_change_head xdp_adjust_head probe_read_str get_socket_cookie \
    get_socket_uid set_hash setsockopt skb_adjust_room redirect_map sk_redirect_map \
    sock_map_update xdp_adjust_meta perf_event_read_value perf_prog_read_value getsockopt \
    override_return sock_ops_cb_flags_set msg_redirect_map msg_apply_bytes msg_cork_bytes \
    msg_pull_data bind xdp_adjust_tail skb_get_xfrm_state get_stack skb_load_bytes_relative \
    fib_lookup sock_hash_update msg_redirect_hash sk_redirect_hash lwt_push_encap \
    lwt_seg6_store_bytes lwt_seg6_adjust_srh lwt_seg6_action rc_repeat rc_keydown skb_cgroup_id \
    get_current_cgroup_id get_local_storage sk_select_reuseport skb_ancestor_cgroup_id \
    sk_lookup_tcp sk_lookup_udp sk_release map_push_elem map_pop_elem map_peek_elem \
    msg_push_data msg_pop_data rc_pointer_rel spin_lock spin_unlock sk_fullsock tcp_sock \
    skb_ecn_set_ce get_listener_sock skc_lookup_tcp tcp_check_syncookie sysctl_get_name \
    sysctl_get_current_value sysctl_get_new_value sysctl_set_new_value strtol strtoul \
    sk_storage_get sk_storage_delete send_signal tcp_gen_syncookie skb_output probe_read_user \
    probe_read_kernel probe_read_user_str probe_read_kernel_str tcp_send_ack send_signal_thread \
    jiffies64 read_branch_records get_ns_current_pid_tgid xdp_output get_netns_cookie \
    get_current_ancestor_cgroup_id sk_assign ktime_get_boot_ns seq_printf seq_write \
    sk_cgroup_id sk_ancestor_cgroup_id ringbuf_output ringbuf_reserve ringbuf_submit \
    ringbuf_discard ringbuf_query csum_level skc_to_tcp6_sock skc_to_tcp_sock \
    skc_to_tcp_timewait_sock skc_to_tcp_request_sock skc_to_udp6_sock get_task_stack \
    load_hdr_opt store_hdr_opt reserve_hdr_opt inode_storage_get inode_storage_delete d_path \
    copy_from_user snprintf_btf seq_printf_btf skb_cgroup_classid redirect_neigh per_cpu_ptr \
    this_cpu_ptr redirect_peer task_storage_get task_storage_delete get_current_task_btf \
    bprm_opts_set ktime_get_coarse_ns ima_inode_hash sock_from_file check_mtu for_each_map_elem \
    snprintf sys_bpf btf_find_by_name_kind sys_close timer_init timer_set_callback timer_start \
    timer_cancel get_func_ip get_attach_cookie task_pt_regs get_branch_snapshot trace_vprintk \
    skc_to_unix_sock kallsyms_lookup_name find_vma loop strncmp get_func_arg get_func_ret \
    get_func_arg_cnt get_retval set_retval xdp_get_buff_len xdp_load_bytes xdp_store_bytes \
    copy_from_user_task skb_set_tstamp ima_file_hash kptr_xchg map_lookup_percpu_elem \
    skc_to_mptcp_sock dynptr_from_mem ringbuf_reserve_dynptr ringbuf_submit_dynptr \
    ringbuf_discard_dynptr dynptr_read dynptr_write dynptr_data tcp_raw_gen_syncookie_ipv4 \
    tcp_raw_gen_syncookie_ipv6 tcp_raw_check_syncookie_ipv4 tcp_raw_check_syncookie_ipv6 \
    ktime_get_tai_ns user_ringbuf_drain cgrp_storage_get cgrp_storage_delete
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::asm::{AluOp, Assembler, AtomicOp, AtomicSize, Cond, Reg, Size};
    use crate::vocab::MapId;

    fn lines(build: impl FnOnce(&mut Assembler)) -> Vec<String> {
        let mut asm = Assembler::new();
        build(&mut asm);
        disassemble(&asm.finish().expect("assembles").insns)
    }

    /// Every ALU form the assembler emits prints as the verifier prints it.
    #[test]
    fn alu_forms() {
        let got = lines(|a| {
            let ops = [
                AluOp::Add,
                AluOp::Sub,
                AluOp::Mul,
                AluOp::Div,
                AluOp::Mod,
                AluOp::Or,
                AluOp::And,
                AluOp::Xor,
                AluOp::Lsh,
                AluOp::Rsh,
                AluOp::Arsh,
                AluOp::Mov,
            ];
            for op in ops {
                a.alu64_imm(op, Reg::R1, -3);
                a.alu64_reg(op, Reg::R1, Reg::R2);
                a.alu32_imm(op, Reg::R3, 7);
                a.alu32_reg(op, Reg::R3, Reg::R4);
            }
            a.neg64(Reg::R5);
            a.neg32(Reg::R5);
        });
        let symbols = [
            "+=", "-=", "*=", "/=", "%=", "|=", "&=", "^=", "<<=", ">>=", "s>>=", "=",
        ];
        let mut expected = Vec::new();
        for s in symbols {
            expected.push(format!("r1 {s} -3"));
            expected.push(format!("r1 {s} r2"));
            expected.push(format!("w3 {s} 7"));
            expected.push(format!("w3 {s} w4"));
        }
        expected.push("r5 = -r5".into());
        expected.push("w5 = -w5".into());
        assert_eq!(got, expected);
    }

    /// Loads, stores and both `ld_imm64` forms, one line per instruction.
    #[test]
    fn memory_forms() {
        let got = lines(|a| {
            a.load(Size::U64, Reg::R1, Reg::R10, -8);
            a.load(Size::U32, Reg::R2, Reg::R1, 0);
            a.load(Size::U16, Reg::R2, Reg::R1, 2);
            a.load(Size::U8, Reg::R2, Reg::R1, 3);
            a.store_reg(Size::U64, Reg::R10, -16, Reg::R1);
            a.store_reg(Size::U8, Reg::R10, -1, Reg::R1);
            a.store_imm(Size::U32, Reg::R10, -4, -7);
            a.store_imm(Size::U16, Reg::R10, -6, 9);
            a.ld_imm64(Reg::R1, 0xdead_beef_0000_0001);
            a.ld_imm64(Reg::R2, u64::MAX);
            a.ld_map_fd(Reg::R3, MapId(7));
        });
        let expected = [
            "r1 = *(u64 *)(r10 -8)",
            "r2 = *(u32 *)(r1 +0)",
            "r2 = *(u16 *)(r1 +2)",
            "r2 = *(u8 *)(r1 +3)",
            "*(u64 *)(r10 -16) = r1",
            "*(u8 *)(r10 -1) = r1",
            "*(u32 *)(r10 -4) = -7",
            "*(u16 *)(r10 -6) = 9",
            "r1 = 0xdeadbeef00000001",
            "r2 = 0xffffffffffffffff",
            "r3 = map[7]",
        ];
        assert_eq!(got, expected);
    }

    /// Every jump condition in JMP and JMP32, imm and reg forms, plus goto, call and exit.
    #[test]
    fn jump_forms() {
        let conds = [
            (Cond::Eq, "=="),
            (Cond::Ne, "!="),
            (Cond::Gt, ">"),
            (Cond::Ge, ">="),
            (Cond::Lt, "<"),
            (Cond::Le, "<="),
            (Cond::Sgt, "s>"),
            (Cond::Sge, "s>="),
            (Cond::Slt, "s<"),
            (Cond::Sle, "s<="),
            (Cond::Set, "&"),
        ];
        let got = lines(|a| {
            let l = a.new_label();
            a.bind(l).unwrap();
            for (cond, _) in conds {
                a.jmp_imm(cond, Reg::R1, 5, l);
                a.jmp_reg(cond, Reg::R1, Reg::R2, l);
                a.jmp32_imm(cond, Reg::R1, -1, l);
                a.jmp32_reg(cond, Reg::R1, Reg::R2, l);
            }
            a.jmp(l);
            a.call_helper(130);
            a.call_helper(1);
            a.call_helper(100_000);
            a.exit();
        });
        let mut expected = Vec::new();
        for (i, (_, s)) in conds.iter().enumerate() {
            let pc = |k: usize| -((4 * i + k + 1) as i64);
            expected.push(format!("if r1 {s} 0x5 goto pc{}", pc(0)));
            expected.push(format!("if r1 {s} r2 goto pc{}", pc(1)));
            expected.push(format!("if w1 {s} 0xffffffff goto pc{}", pc(2)));
            expected.push(format!("if w1 {s} w2 goto pc{}", pc(3)));
        }
        expected.push(format!("goto pc-{}", conds.len() * 4 + 1));
        expected.push("call bpf_ringbuf_output#130".into());
        expected.push("call bpf_map_lookup_elem#1".into());
        expected.push("call unknown#100000".into());
        expected.push("exit".into());
        assert_eq!(got, expected);
    }

    /// Forward offsets print with a plus sign, as `goto pc+N`.
    #[test]
    fn forward_jump() {
        let got = lines(|a| {
            let l = a.new_label();
            a.jmp32_imm(Cond::Eq, Reg::R1, 0, l);
            a.jmp(l);
            a.bind(l).unwrap();
            a.exit();
        });
        assert_eq!(got, ["if w1 == 0x0 goto pc+1", "goto pc+0", "exit"]);
    }

    /// Every atomic form, both widths.
    #[test]
    fn atomic_forms() {
        let got = lines(|a| {
            for size in [AtomicSize::U64, AtomicSize::U32] {
                for op in [AtomicOp::Add, AtomicOp::Or, AtomicOp::And, AtomicOp::Xor] {
                    a.atomic(size, op, Reg::R1, 0, Reg::R2);
                    a.atomic_fetch(size, op, Reg::R10, -8, Reg::R3);
                }
                a.atomic_xchg(size, Reg::R1, 8, Reg::R2);
                a.atomic_cmpxchg(size, Reg::R1, -8, Reg::R2);
            }
        });
        let mut expected = Vec::new();
        for (ty, bits) in [("u64", "64"), ("u32", "")] {
            for (sym, name) in [("+=", "add"), ("|=", "or"), ("&=", "and"), ("^=", "xor")] {
                expected.push(format!("lock *({ty} *)(r1 +0) {sym} r2"));
                expected.push(format!(
                    "r3 = atomic{bits}_fetch_{name}(({ty} *)(r10 -8), r3)"
                ));
            }
            expected.push(format!("r2 = atomic{bits}_xchg(({ty} *)(r1 +8), r2)"));
            expected.push(format!(
                "r0 = atomic{bits}_cmpxchg(({ty} *)(r1 -8), r0, r2)"
            ));
        }
        assert_eq!(got, expected);
    }

    /// `disassemble_at` reports 2 slots for `ld_imm64`, and a truncated one is invalid.
    #[test]
    fn slot_counts_and_invalid() {
        let insns = [0x0000_0001_0000_0118, 0];
        assert_eq!(disassemble_at(&insns, 0), ("r1 = 0x1".to_string(), 2));
        assert_eq!(disassemble(&insns[..1]), ["invalid 0x0000000100000118"]);
        assert_eq!(disassemble(&[0xff]), ["invalid 0x00000000000000ff"]);
    }

    /// The helper table is in id order up to the newest helper it knows.
    #[test]
    fn helper_table() {
        assert_eq!(helper_name(0), Some("unspec"));
        assert_eq!(helper_name(14), Some("get_current_pid_tgid"));
        assert_eq!(helper_name(113), Some("probe_read_kernel"));
        assert_eq!(helper_name(133), Some("ringbuf_discard"));
        assert_eq!(helper_name(211), Some("cgrp_storage_delete"));
        assert_eq!(helper_name(212), None);
        assert_eq!(helper_name(-1), None);
    }
}
