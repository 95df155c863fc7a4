//! `sqlx::migrate!` embeds the migrations at compile time, but cargo does not know
//! the macro reads that folder: without this, a new migration file is left out of
//! the binary until something else in the crate changes.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
