use super::*;

fn def(text: &str) -> CDefinition {
    parse(text, 0, &mut Enumerators::new()).unwrap_or_else(|e| panic!("{text}: {e:?}"))
}

fn record(text: &str) -> CRecord {
    match def(text) {
        CDefinition::Record(r) => r,
        other => panic!("not a record: {other:?}"),
    }
}

fn named(name: &str) -> CType {
    CType::Named {
        name: name.into(),
        span: Span::default(),
    }
}

/// Member types with spans dropped, for comparing shapes.
fn shape(ty: &CType) -> CType {
    match ty {
        CType::Named { name, .. } => named(name),
        CType::Pointer(inner) => CType::Pointer(Box::new(shape(inner))),
        CType::Array(inner, n) => CType::Array(Box::new(shape(inner)), *n),
        other => other.clone(),
    }
}

fn members(r: &CRecord) -> Vec<(Option<String>, CType, Option<u32>)> {
    r.members
        .as_ref()
        .expect("a body")
        .iter()
        .map(|m| (m.name.clone(), shape(&m.ty), m.bits))
        .collect()
}

fn ptr(ty: CType) -> CType {
    CType::Pointer(Box::new(ty))
}

fn array(ty: CType, n: u32) -> CType {
    CType::Array(Box::new(ty), n)
}

/// Declarators nest as in C: arrays of pointers, pointers to arrays,
/// 2-D arrays, function pointers.
#[test]
fn parses_declarators() {
    let r = record(
        "struct S { int *z[4]; char (*p)[8]; int y[2][3]; void (*fn)(int, char *); const char* a }",
    );
    assert_eq!(r.name.as_deref(), Some("S"));
    let expected = vec![
        (Some("z".into()), array(ptr(named("int")), 4), None),
        (Some("p".into()), ptr(array(named("char"), 8)), None),
        (Some("y".into()), array(array(named("int"), 3), 2), None),
        (Some("fn".into()), ptr(named("void")), None),
        (Some("a".into()), ptr(named("char")), None),
    ];
    assert_eq!(members(&r), expected);
}

/// Built-in type words combine in any order into one canonical name.
#[test]
fn canonical_builtin_names() {
    let r = record(
        "struct T { long unsigned int a; signed char b; long long c; unsigned d; short int e; uint32_t f; struct task_struct t; }",
    );
    let names: Vec<String> = members(&r)
        .into_iter()
        .map(|(_, ty, _)| match ty {
            CType::Named { name, .. } => name,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        names,
        [
            "unsigned long",
            "signed char",
            "long long",
            "unsigned int",
            "short",
            "uint32_t",
            "struct task_struct"
        ]
    );
}

/// Bitfields, several declarators per line, anonymous and nested members.
#[test]
fn parses_bitfields_and_nested_members() {
    let r = record(
        "struct B { unsigned int a:4, b:8; int :0; struct { int n; } in; union { int i; char c; }; }",
    );
    let m = members(&r);
    assert_eq!(m[0], (Some("a".into()), named("unsigned int"), Some(4)));
    assert_eq!(m[1], (Some("b".into()), named("unsigned int"), Some(8)));
    assert_eq!(m[2], (None, named("int"), Some(0)));
    assert_eq!(m[3].0.as_deref(), Some("in"));
    assert!(matches!(&m[3].1, CType::Record(inner) if inner.name.is_none() && !inner.union));
    assert_eq!(m[4].0, None);
    assert!(matches!(&m[4].1, CType::Record(inner) if inner.union));
}

/// Enumerators count up from the last value given; later definitions see them.
#[test]
fn enum_values() {
    let mut known = Enumerators::new();
    let CDefinition::Enum(e) = parse(
        "enum color { RED = 1, GREEN, BLUE = 10, LAST = BLUE << 1, }",
        0,
        &mut known,
    )
    .unwrap() else {
        panic!("an enum");
    };
    assert_eq!(
        e.values,
        [
            ("RED".into(), 1),
            ("GREEN".into(), 2),
            ("BLUE".into(), 10),
            ("LAST".into(), 20)
        ]
    );
    let r = parse("struct A { char name[GREEN * 3]; }", 0, &mut known).unwrap();
    let CDefinition::Record(r) = r else {
        panic!("a record")
    };
    assert_eq!(members(&r)[0].1, array(named("char"), 6));
}

/// `typedef` names a type; `struct X;` declares one without members.
#[test]
fn typedefs_and_declarations() {
    let CDefinition::Typedef { name, ty, .. } = def("typedef struct { int a; } pair_t;") else {
        panic!("a typedef");
    };
    assert_eq!(name, "pair_t");
    assert!(matches!(ty, CType::Record(_)));
    let r = record("struct later;");
    assert_eq!((r.name.as_deref(), r.members), (Some("later"), None));
}

/// Mistakes point at the offending token.
#[test]
fn reports_errors() {
    let err = |text: &str| parse(text, 100, &mut Enumerators::new()).expect_err(text);
    let e = err("struct X { int a; } x;");
    assert_eq!(e.message, "unexpected `x` after the definition");
    assert_eq!(e.span, Span::new(120, 121));
    assert_eq!(
        err("struct X { int a b; }").message,
        "expected `;`, found `b`"
    );
    assert_eq!(
        err("struct X { int a[N]; }").message,
        "`N` is not a constant defined before"
    );
    assert_eq!(
        err("struct X { int a:99; }").message,
        "bitfield width 99 is out of range"
    );
    assert_eq!(
        err("struct X { int a; } __attribute__((packed));").message,
        "`__attribute__` is not supported in script type definitions"
    );
    assert_eq!(
        err("struct X { __attribute__((x)) int a; }").message,
        "`__attribute__` is not supported in script type definitions"
    );
}
