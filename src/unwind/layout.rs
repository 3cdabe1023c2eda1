//! Where the unwinder reads the current address space's identity in kernel
//! memory: `task_struct.mm`, then `mm_struct.start_stack` and `end_code`
//! (offsets from the kernel's BTF, through the checker's
//! [`Environment`]). The table manager writes the same two values, read
//! from `/proc/PID/stat`, into a process's mappings entry; an `exec`
//! changes both, so an entry read before it no longer matches. Also
//! where a task's uprobe state says which instruction it is stepping out
//! of line ([`XolLayout`]) and which return addresses its pending
//! uretprobes replaced ([`ReturnLayout`]), and what the unwinder reads of
//! a memory area the kernel found for a pc in no known mapping
//! ([`VmaLayout`]).

use crate::vocab::Environment;
use crate::vocab::kernel_types::{KernelKind, find_member};

/// Byte offsets of the members the unwinder reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmLayout {
    /// `struct task_struct`'s `mm` (a `struct mm_struct *`, NULL for kernel threads).
    pub task_mm: u32,
    pub mm_start_stack: u32,
    pub mm_end_code: u32,
    /// None when the kernel has no uprobes (`task_struct` has no `utask`).
    pub xol: Option<XolLayout>,
    /// None when the kernel's types do not describe memory areas (the
    /// unwinder then does not ask the kernel for one).
    pub vma: Option<VmaLayout>,
}

/// Byte offsets of what the unwinder reads of a `struct vm_area_struct`
/// (`bpf_find_vma`'s callback gets one) to find its file's table: the
/// area's `vm_start`, `vm_end`, `vm_pgoff` (its file offset in pages) and
/// `vm_flags`, its `vm_file`, the file's `f_inode`, and the inode's
/// `i_ino` and `i_sb->s_dev` (the device and inode `/proc/PID/maps`
/// shows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmaLayout {
    pub vm_start: u32,
    pub vm_end: u32,
    pub vm_pgoff: u32,
    pub vm_flags: u32,
    pub vm_file: u32,
    pub file_inode: u32,
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub sb_dev: u32,
}

/// Byte offsets of a task's uprobe state: `task_struct.utask` (a `struct
/// uprobe_task *`, NULL until the task first hits a uprobe), and in it
/// `xol_vaddr` (the out-of-line slot the displaced instruction runs in, 0
/// when none) and `vaddr` (the probed address it was copied from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XolLayout {
    pub task_utask: u32,
    pub utask_xol_vaddr: u32,
    pub utask_vaddr: u32,
    pub returns: ReturnLayout,
}

/// Byte offsets of a task's pending uretprobes: `uprobe_task.return_instances`
/// (a list of `struct return_instance`, innermost first: `stack`, the `sp`
/// at the probed function's entry, where its return address was replaced by
/// the trampoline; `orig_ret_vaddr`, the address replaced; `next`), and the
/// trampoline's address, `mm_struct.uprobes_state.xol_area->vaddr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReturnLayout {
    pub utask_return_instances: u32,
    pub instance_stack: u32,
    pub instance_orig_ret: u32,
    pub instance_next: u32,
    pub mm_xol_area: u32,
    pub xol_area_vaddr: u32,
}

impl MmLayout {
    /// The offsets on the machine `env` describes.
    pub fn resolve(env: &dyn Environment) -> Result<MmLayout, String> {
        let task_mm = member_offset(env, "struct task_struct", "mm")?;
        let mm_start_stack = member_offset(env, "struct mm_struct", "start_stack")?;
        let mm_end_code = member_offset(env, "struct mm_struct", "end_code")?;
        Ok(MmLayout {
            task_mm,
            mm_start_stack,
            mm_end_code,
            xol: XolLayout::resolve(env)?,
            vma: VmaLayout::resolve(env)?,
        })
    }
}

impl VmaLayout {
    /// The offsets, or None when the kernel's types have no memory areas.
    fn resolve(env: &dyn Environment) -> Result<Option<VmaLayout>, String> {
        const VMA: &str = "struct vm_area_struct";
        let Ok(vm_start) = member_offset(env, VMA, "vm_start") else {
            return Ok(None);
        };
        Ok(Some(VmaLayout {
            vm_start,
            vm_end: member_offset(env, VMA, "vm_end")?,
            vm_pgoff: member_offset(env, VMA, "vm_pgoff")?,
            vm_flags: member_offset(env, VMA, "vm_flags")?,
            vm_file: member_offset(env, VMA, "vm_file")?,
            file_inode: member_offset(env, "struct file", "f_inode")?,
            inode_ino: member_offset(env, "struct inode", "i_ino")?,
            inode_sb: member_offset(env, "struct inode", "i_sb")?,
            sb_dev: member_offset(env, "struct super_block", "s_dev")?,
        }))
    }
}

impl XolLayout {
    /// The offsets, or None on a kernel built without uprobes.
    fn resolve(env: &dyn Environment) -> Result<Option<XolLayout>, String> {
        let Ok(task_utask) = member_offset(env, "struct task_struct", "utask") else {
            return Ok(None);
        };
        Ok(Some(XolLayout {
            task_utask,
            utask_xol_vaddr: member_offset(env, "struct uprobe_task", "xol_vaddr")?,
            utask_vaddr: member_offset(env, "struct uprobe_task", "vaddr")?,
            returns: ReturnLayout::resolve(env)?,
        }))
    }
}

impl ReturnLayout {
    fn resolve(env: &dyn Environment) -> Result<ReturnLayout, String> {
        let instance = |member| member_offset(env, "struct return_instance", member);
        let uprobes_state = member_offset(env, "struct mm_struct", "uprobes_state")?;
        Ok(ReturnLayout {
            utask_return_instances: member_offset(env, "struct uprobe_task", "return_instances")?,
            instance_stack: instance("stack")?,
            instance_orig_ret: instance("orig_ret_vaddr")?,
            instance_next: instance("next")?,
            mm_xol_area: uprobes_state + member_offset(env, "struct uprobes_state", "xol_area")?,
            xol_area_vaddr: member_offset(env, "struct xol_area", "vaddr")?,
        })
    }
}

/// `task_struct.stack`'s offset: the lowest address of a task's kernel
/// stack, which the kernel-stack walker copies up to its top.
pub fn task_stack_offset(env: &dyn Environment) -> Result<u32, String> {
    member_offset(env, "struct task_struct", "stack")
}

/// The byte offset of `member` in struct `type_name`, looking into
/// anonymous members.
pub(crate) fn member_offset(
    env: &dyn Environment,
    type_name: &str,
    member: &str,
) -> Result<u32, String> {
    let members = |id| match env.kernel_type(id).ok()?.kind {
        KernelKind::Struct { members, .. } => Some(members),
        _ => None,
    };
    let id = env.kernel_type_named(type_name)?;
    let top = members(id).ok_or_else(|| format!("`{type_name}` is not a struct"))?;
    let found = find_member(&top, member, &members)
        .ok_or_else(|| format!("`{type_name}` has no member `{member}`"))?;
    Ok(found.offset_bits / 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    /// The offsets come from the machine's types.
    #[test]
    fn resolves_on_the_fake_machine() {
        let layout = MmLayout::resolve(&FakeMachine).expect("the fake kernel has them");
        assert_eq!(
            layout,
            MmLayout {
                task_mm: 416,
                mm_start_stack: 312,
                mm_end_code: 272,
                xol: None,
                vma: None,
            }
        );
    }

    /// This kernel's BTF has them too.
    #[test]
    fn resolves_on_this_kernel() {
        let env = crate::runtime::targets::environment::SystemEnvironment::default();
        let layout = MmLayout::resolve(&env).expect("kernel BTF");
        assert!(layout.task_mm > 0 && layout.mm_start_stack > layout.mm_end_code);
        let xol = layout.xol.expect("this kernel has uprobes");
        assert_ne!(xol.utask_xol_vaddr, xol.utask_vaddr);
        let returns = xol.returns;
        assert_ne!(returns.instance_stack, returns.instance_orig_ret);
        assert!(returns.instance_next > returns.instance_orig_ret);
        let vma = layout.vma.expect("this kernel describes memory areas");
        assert!(vma.vm_end == vma.vm_start + 8, "{vma:?}");
        assert_ne!(vma.inode_ino, vma.inode_sb);
    }
}
