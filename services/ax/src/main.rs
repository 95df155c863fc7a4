//! ax
fn main() {}
