//! What `callgate --version` reports of this build (`callgate._native.__build__`): the profile,
//! the optimization level, the target and the compiler that made the module; and the hash of the
//! sources `scripts/native` built (`__source__`).
use std::process::Command;

fn main() {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| "?".into());
    let rustc = Command::new(env("RUSTC"))
        .arg("-V")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|| "rustc ?".into());
    println!(
        "cargo:rustc-env=CALLGATE_NATIVE_BUILD={} opt-level {}, {}, {}",
        env("PROFILE"),
        env("OPT_LEVEL"),
        env("TARGET"),
        rustc
    );
    // scripts/native passes the hash of the sources it builds; it then finds this text in the
    // module, so a module another clone's build left in the shared target dir is never taken.
    println!(
        "cargo:rustc-env=CALLGATE_NATIVE_SOURCE=callgate-native-source:{}",
        env("CALLGATE_NATIVE_SOURCE")
    );
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CALLGATE_NATIVE_SOURCE");
    println!("cargo:rerun-if-env-changed=RUSTC");
}
