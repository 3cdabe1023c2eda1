use std::process::Command;

use super::*;
use crate::frontend::fake_machine::FakeMachine;
use crate::frontend::parse::parse_text;
use crate::vocab::kernel_types::find_member;

/// Structs whose layout gcc computes too (bitfields, nesting, unions,
/// 2-D arrays, zero-width bitfields, doubles).
const DEFINITIONS: &str = "
struct S { char a; int b; long c; struct inner { short s; char c; } in; char name[6]; unsigned int bf1:3, bf2:5; int arr[3]; };
struct B1 { short a:4, b:8, c:3, d:1; int e:9, f:15, g:1, h:2, i:5; };
union U { int i; char c[5]; };
struct P { char c; char *p; int x[2][3]; short s; };
struct Z { char a; int :0; char b; };
struct D { char c; double d; unsigned long long q:33; char t; };
struct N { struct { int n; } a; union { long l; char u; }; char tail; };
";

/// `(type, member)` pairs whose bit offsets are compared with gcc's; a
/// trailing `:` marks a bitfield.
const MEMBERS: &[(&str, &[&str])] = &[
    (
        "struct S",
        &["a", "b", "c", "in", "name", "bf1:", "bf2:", "arr"],
    ),
    (
        "struct B1",
        &["a:", "b:", "c:", "d:", "e:", "f:", "g:", "h:", "i:"],
    ),
    ("union U", &["i", "c"]),
    ("struct P", &["c", "p", "x", "s"]),
    ("struct Z", &["a", "b"]),
    ("struct D", &["c", "d", "q:", "t"]),
    ("struct N", &["a", "l", "u", "tail"]),
];

fn table(definitions: &str) -> TypeTable<'static> {
    let script = parse_text(&format!("{definitions}\nBEGIN {{}}")).expect("parses");
    let mut table = TypeTable::new(&FakeMachine);
    let errors = table.define(&script.types);
    assert!(errors.is_empty(), "{errors:?}");
    table
}

/// Our size and member bit offsets of `ty`, as "size off off ...".
fn ours(table: &mut TypeTable, ty: &str, members: &[&str]) -> String {
    let id = table.named(ty).expect("defined");
    let all = table.members(id);
    let mut out = vec![table.size_of(id).expect("size").to_string()];
    for name in members {
        let name = name.trim_end_matches(':');
        let resolve = |id| Some(table.members(id));
        let found = find_member(&all, name, &resolve).unwrap_or_else(|| panic!("{ty}.{name}"));
        out.push(found.offset_bits.to_string());
    }
    out.join(" ")
}

/// A C program printing the same as gcc lays the types out: bitfields are
/// found by setting one in a zeroed object and finding its first set bit.
fn c_program() -> String {
    let mut body = String::new();
    for (ty, members) in MEMBERS {
        body.push_str(&format!("  {{ {ty} v; printf(\"%zu\", sizeof v);\n"));
        for m in *members {
            match m.strip_suffix(':') {
                Some(bits) => body.push_str(&format!(
                    "    memset(&v, 0, sizeof v); v.{bits} = -1; printf(\" %d\", first_bit(&v, sizeof v));\n"
                )),
                None => body.push_str(&format!("    printf(\" %zu\", offsetof({ty}, {m}) * 8);\n")),
            }
        }
        body.push_str("    printf(\"\\n\"); }\n");
    }
    format!(
        "#include <stdio.h>\n#include <string.h>\n#include <stddef.h>\n{DEFINITIONS}\n\
         static int first_bit(const void *p, size_t n) {{ const unsigned char *b = p; \
         for (size_t i = 0; i < n * 8; i++) if (b[i / 8] >> (i % 8) & 1) return (int)i; return -1; }}\n\
         int main(void) {{\n{body}  return 0;\n}}\n"
    )
}

/// Layouts equal gcc's for every member of every test struct.
#[test]
fn layouts_match_gcc() {
    let mut table = table(DEFINITIONS);
    let ours: Vec<String> = MEMBERS
        .iter()
        .map(|(ty, m)| ours(&mut table, ty, m))
        .collect();
    assert_eq!(ours[0], "40 0 32 64 128 160 208 211 224");
    let dir = tempfile::tempdir().expect("temp dir");
    let (source, binary) = (dir.path().join("l.c"), dir.path().join("l"));
    std::fs::write(&source, c_program()).expect("source");
    let Ok(build) = Command::new("cc")
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .output()
    else {
        println!("skipped the gcc comparison: no C compiler");
        return;
    };
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let run = Command::new(&binary).output().expect("runs");
    let gcc = String::from_utf8(run.stdout).expect("UTF-8");
    assert_eq!(ours, gcc.lines().collect::<Vec<_>>());
}

/// Sizes and alignments of built-in names, bpftrace's and C's.
#[test]
fn builtin_sizes() {
    let mut table = TypeTable::new(&FakeMachine);
    for (name, size) in [
        ("uint8", 1),
        ("int16", 2),
        ("unsigned int", 4),
        ("long", 8),
        ("uint64_t", 8),
        ("_Bool", 1),
        ("double", 8),
    ] {
        let id = table.named(name).expect(name);
        assert_eq!(table.size_of(id), Ok(size), "{name}");
        assert_eq!(table.align_of(id), Ok(size), "{name}");
    }
    let int = table.named("int").expect("int");
    let arr = table.array_of(int, 4);
    assert_eq!(
        (table.size_of(arr), table.name_of(arr)),
        (Ok(16), "int[4]".into())
    );
    let p = table.pointer_to(arr);
    assert_eq!(
        (table.size_of(p), table.name_of(p)),
        (Ok(8), "int[4] *".into())
    );
    assert_eq!(table.pointer_to(arr), p, "pointer types are interned");
}

/// A script struct shadows the kernel's of the same name; members may
/// point to their own record or to records defined nowhere.
#[test]
fn script_types_shadow_and_point() {
    let mut table =
        table("struct task_struct { int x; struct task_struct *next; struct nowhere *n; };");
    let kernel = FakeMachine
        .kernel_type_named("struct task_struct")
        .expect("fake BTF");
    let shadow = table.get(kernel).expect("resolves");
    assert!(
        matches!(shadow.kind, KernelKind::Struct { size: 24, .. }),
        "{shadow:?}"
    );
    let id = table.named("struct task_struct").expect("named");
    assert_eq!(table.resolve(kernel), id);
}

/// Enum constants: the script's, then the kernel's; a member of an
/// undefined type is an error naming it.
#[test]
fn enums_and_errors() {
    let table = table("enum color { RED = 1, GREEN };");
    assert_eq!(table.enum_constant("GREEN"), Ok(Some(2)));
    assert_eq!(table.enum_constant("BLUE"), Ok(None));
    let script =
        parse_text("struct x { struct thread_info t; struct y; } BEGIN {}").expect("parses");
    let mut table = TypeTable::new(&FakeMachine);
    let errors = table.define(&script.types);
    assert_eq!(errors[0].message, "unknown type `struct thread_info`");
}
