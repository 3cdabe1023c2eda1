//! Demangling of user function names: Rust (legacy `_ZN…E` and v0 `_R…`)
//! and C++ (Itanium `_Z…`) names are demangled, every other name is kept.
//! A C function called `c`, `b` or `a` is a valid mangled *type* to a C++
//! demangler (`char`, `bool`, `signed char`), which is why blazesym's own
//! demangling (it tries C++ on names of unknown language) is not used.

/// `name` demangled when it carries a Rust or C++ mangling prefix.
pub fn demangle(name: &str) -> String {
    if (name.starts_with("_R") || name.starts_with("_ZN"))
        && let Ok(rust) = rustc_demangle::try_demangle(name)
    {
        // `{:#}` leaves out the legacy scheme's hash suffix.
        return format!("{rust:#}");
    }
    if name.starts_with("_Z")
        && let Ok(symbol) = cpp_demangle::Symbol::new(name)
        && let Ok(cpp) = symbol.demangle()
    {
        return cpp;
    }
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C names stay as they are, even those a C++ demangler reads as types.
    #[test]
    fn keeps_c_names() {
        for name in [
            "c",
            "b",
            "a",
            "main",
            "spin_here",
            "_start",
            "__libc_start_main",
        ] {
            assert_eq!(demangle(name), name);
        }
    }

    /// Rust (both schemes, hash dropped) and C++ names are demangled.
    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN10spin_sleep4main17h0123456789abcdefE"),
            "spin_sleep::main"
        );
        assert_eq!(demangle("_RNvCs1234_10spin_sleep4main"), "spin_sleep::main");
        assert_eq!(demangle("_Z3fooi"), "foo(int)");
        assert_eq!(demangle("_Zbad"), "_Zbad");
    }
}
