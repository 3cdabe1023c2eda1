use super::*;
use crate::vocab::PassedIn;

fn int() -> KernelType {
    KernelType {
        name: "int".into(),
        kind: KernelKind::Int {
            size: 4,
            signed: true,
        },
    }
}

/// A store holding `kinds`, and their ids.
fn store(kinds: Vec<KernelType>) -> (DebugTypes, Vec<KTypeId>) {
    let mut types = DebugTypes::default();
    let ids = kinds
        .into_iter()
        .map(|ty| {
            let id = types.reserve();
            types.set(id, ty);
            id
        })
        .collect();
    (types, ids)
}

/// Integer-class parameters take rdi..r9, then the stack; doubles and
/// large structs take no integer register.
#[test]
fn sysv_registers() {
    let double = KernelType {
        name: "double".into(),
        kind: KernelKind::Float { size: 8 },
    };
    let big = KernelType {
        name: "struct big".into(),
        kind: KernelKind::Struct {
            union: false,
            size: 24,
            members: Vec::new().into(),
        },
    };
    let (types, ids) = store(vec![int(), double, big]);
    let order = [0, 1, 2, 0, 0, 0, 0, 0, 0];
    let params: Vec<(String, KTypeId)> = order.iter().map(|&i| (format!("p{i}"), ids[i])).collect();
    let passed = passing(&params, &types);
    let registers: Vec<Option<PassedIn>> = passed.iter().map(|p| p.clone().ok()).collect();
    use PassedIn::*;
    let expected = [
        Some(Register(0)),
        None,
        None,
        Some(Register(1)),
        Some(Register(2)),
        Some(Register(3)),
        Some(Register(4)),
        Some(Register(5)),
        Some(Stack(24)),
    ];
    assert_eq!(registers, expected);
}

/// A program gcc compiles with `-g`: its functions' parameters, their
/// registers and types, and a struct with bitfields, 2-D arrays and a
/// pointer to itself, laid out as gcc lays it out.
#[test]
fn reads_gcc_debug_info() {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/types_target.c");
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = dir.path().join("types_target");
    let Ok(build) = std::process::Command::new("cc")
        .args(["-O1", "-g", "-o"])
        .arg(&binary)
        .arg(source)
        .output()
    else {
        println!("skipped: no C compiler");
        return;
    };
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let mut types = DebugTypes::default();
    let params = function_params(&binary, "describe", &mut types).expect("describe");
    let shown: Vec<(String, String, Result<PassedIn, String>)> = params
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                types.name(p.ty).to_string(),
                p.passed.clone(),
            )
        })
        .collect();
    let expected = [
        ("bar", "struct Bar *", Ok(PassedIn::Register(0))),
        ("tag", "char", Ok(PassedIn::Register(1))),
        ("count", "int *", Ok(PassedIn::Register(2))),
    ]
    .map(|(n, t, p)| (n.to_string(), t.to_string(), p));
    assert_eq!(shown, expected);

    let foo = named_type(&binary, "struct Foo", &mut types)
        .expect("reads")
        .expect("Foo");
    let KernelKind::Struct { size, members, .. } = &types.get(foo).expect("type").kind else {
        panic!("struct Foo is not a struct");
    };
    let layout: Vec<(&str, u32, Option<u8>, &str)> = members
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                m.offset_bits,
                m.bitfield_bits,
                types.name(m.ty),
            )
        })
        .collect();
    assert_eq!(*size, 48);
    assert_eq!(
        layout,
        [
            ("a", 0, None, "int"),
            ("b", 32, None, "char[10]"),
            ("c", 128, None, "int[3]"),
            ("bf1", 224, Some(3), "unsigned int"),
            ("bf2", 227, Some(5), "unsigned int"),
            ("y", 240, None, "short int[2][2]"),
            ("next", 320, None, "struct Foo *"),
        ]
    );
    assert!(
        named_type(&binary, "struct Missing", &mut types)
            .expect("reads")
            .is_none()
    );

    // Through the environment, as the checker and `-lv` see them.
    use crate::vocab::Environment;
    let env = crate::runtime::targets::environment::SystemEnvironment::new(None);
    let listed: Vec<String> = env
        .function_params(&binary, "describe")
        .expect("describe")
        .iter()
        .map(FunctionParam::listing)
        .collect();
    assert_eq!(listed, ["struct Bar* bar", "char tag", "int* count"]);
    let missing = function_params(&binary, "missing", &mut types);
    assert!(missing.is_err_and(|e| e.contains("no debug info for function `missing`")));
}

/// A small struct by value takes one register per eightbyte (INTEGER), or
/// none when its eightbytes hold only floats (SSE); it is refused, and the
/// parameters after it are located.
#[test]
fn small_structs_take_their_registers() {
    let double = KernelType {
        name: "double".into(),
        kind: KernelKind::Float { size: 8 },
    };
    let (mut types, ids) = store(vec![int(), double]);
    let member = |ty, offset_bits| KernelMember {
        name: "m".into(),
        ty,
        offset_bits,
        bitfield_bits: None,
    };
    let record = |name: &str, size, members| KernelType {
        name: name.into(),
        kind: KernelKind::Struct {
            union: false,
            size,
            members: Vec::into(members),
        },
    };
    let two_ints = record(
        "struct two",
        16,
        vec![member(ids[0], 0), member(ids[0], 64)],
    );
    let floats = record("struct fl", 16, vec![member(ids[1], 0), member(ids[1], 64)]);
    let [two, fl] = [two_ints, floats].map(|ty| {
        let id = types.reserve();
        types.set(id, ty);
        id
    });
    let params: Vec<(String, KTypeId)> = [ids[0], two, fl, ids[0], ids[0], ids[0], ids[0]]
        .iter()
        .enumerate()
        .map(|(i, &ty)| (format!("p{i}"), ty))
        .collect();
    let passed = passing(&params, &types);
    use PassedIn::*;
    assert_eq!(passed[0], Ok(Register(0)));
    assert!(
        passed[1]
            .as_ref()
            .is_err_and(|e| e.contains("`struct two` is passed by value"))
    );
    assert!(passed[2].is_err());
    assert_eq!(
        passed[3..],
        [
            Ok(Register(3)),
            Ok(Register(4)),
            Ok(Register(5)),
            Ok(Stack(0))
        ]
    );
}
