//! (placeholder; being written)
