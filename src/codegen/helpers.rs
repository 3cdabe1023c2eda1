//! BPF helper function ids used by generated code (from the kernel's `enum bpf_func_id`).

pub const MAP_LOOKUP_ELEM: u32 = 1;
pub const MAP_UPDATE_ELEM: u32 = 2;
pub const MAP_DELETE_ELEM: u32 = 3;
pub const PROBE_READ: u32 = 4;
pub const KTIME_GET_NS: u32 = 5;
pub const TRACE_PRINTK: u32 = 6;
pub const GET_PRANDOM_U32: u32 = 7;
pub const GET_SMP_PROCESSOR_ID: u32 = 8;
pub const GET_CURRENT_PID_TGID: u32 = 14;
pub const GET_CURRENT_UID_GID: u32 = 15;
pub const GET_CURRENT_COMM: u32 = 16;
pub const PROBE_READ_STR: u32 = 45;
pub const PROBE_READ_USER: u32 = 112;
pub const PROBE_READ_KERNEL: u32 = 113;
pub const PROBE_READ_USER_STR: u32 = 114;
pub const PROBE_READ_KERNEL_STR: u32 = 115;
pub const RINGBUF_OUTPUT: u32 = 130;
pub const RINGBUF_RESERVE: u32 = 131;
pub const RINGBUF_SUBMIT: u32 = 132;
pub const RINGBUF_QUERY: u32 = 134;

/// `bpf_ringbuf_query`: bytes not yet consumed.
pub const BPF_RB_AVAIL_DATA: i64 = 0;
/// `flags` for `bpf_ringbuf_output` and `bpf_ringbuf_submit`: do not wake the reader / wake it now.
pub const BPF_RB_NO_WAKEUP: i32 = 1;
pub const BPF_RB_FORCE_WAKEUP: i32 = 2;

/// `flags` for `bpf_map_update_elem`: create or replace.
pub const BPF_ANY: i64 = 0;

pub const GET_STACKID: u32 = 27;
pub const GET_NUMA_NODE_ID: u32 = 42;
pub const OVERRIDE_RETURN: u32 = 58;
pub const GET_CURRENT_CGROUP_ID: u32 = 80;
pub const SEND_SIGNAL: u32 = 109;
pub const D_PATH: u32 = 147;
pub const PERF_EVENT_READ_VALUE: u32 = 55;
/// `flags` for `bpf_perf_event_read_value`: the entry of the current CPU.
pub const BPF_F_CURRENT_CPU: i64 = 0xffff_ffff;
/// `flags` for `bpf_get_stackid`: the user stack instead of the kernel's.
pub const BPF_F_USER_STACK: i64 = 1 << 8;
pub const GET_CURRENT_TASK: u32 = 35;
pub const TASK_STORAGE_GET: u32 = 156;
pub const TASK_STORAGE_DELETE: u32 = 157;
pub const GET_CURRENT_TASK_BTF: u32 = 158;
/// `flags` for `bpf_task_storage_get`: create the value when absent.
pub const LOCAL_STORAGE_GET_F_CREATE: i64 = 1;
pub const GET_STACK: u32 = 67;
/// `bpf_get_task_stack(task, buf, size, flags)`
pub const GET_TASK_STACK: u32 = 141;
/// `bpf_snprintf(str, size, fmt, data, data_len)`: `fmt` in a frozen
/// read-only map.
pub const SNPRINTF: u32 = 165;
/// `bpf_task_pt_regs(task)`: the user registers saved at the task's last
/// entry into the kernel.
pub const TASK_PT_REGS: u32 = 175;
/// `bpf_kallsyms_lookup_name(name, size, flags, res)`: syscall programs only.
pub const KALLSYMS_LOOKUP_NAME: u32 = 179;
/// `bpf_find_vma(task, addr, callback, ctx, flags)`: calls `callback(task,
/// vma, ctx)` with the task's memory area holding `addr`, if one does.
pub const FIND_VMA: u32 = 180;
/// `bpf_loop(n, callback, ctx, flags)`
pub const LOOP: u32 = 181;

/// A helper's name as the kernel's `bpf_func_name` table (and bpftrace's
/// messages) spell it, for the helpers generated code calls.
pub fn name(helper: u32) -> std::borrow::Cow<'static, str> {
    let name = match helper {
        MAP_LOOKUP_ELEM => "map_lookup_elem",
        MAP_UPDATE_ELEM => "map_update_elem",
        MAP_DELETE_ELEM => "map_delete_elem",
        GET_CURRENT_COMM => "get_current_comm",
        GET_STACKID => "get_stackid",
        SEND_SIGNAL => "send_signal",
        PROBE_READ => "probe_read",
        PROBE_READ_STR => "probe_read_str",
        PROBE_READ_USER => "probe_read_user",
        PROBE_READ_KERNEL => "probe_read_kernel",
        PROBE_READ_USER_STR => "probe_read_user_str",
        PROBE_READ_KERNEL_STR => "probe_read_kernel_str",
        D_PATH => "d_path",
        TRACE_PRINTK => "trace_printk",
        other => return format!("helper {other}").into(),
    };
    name.into()
}

/// The kfunc that runs a callback in a task on its way back to user space
/// (`struct bpf_task_work`): `(task, tw, map, callback, aux)`, named with
/// `_impl` (its last argument filled by the verifier) since 6.18.
pub const TASK_WORK_SCHEDULE_RESUME: [&str; 2] = [
    "bpf_task_work_schedule_resume_impl",
    "bpf_task_work_schedule_resume",
];
