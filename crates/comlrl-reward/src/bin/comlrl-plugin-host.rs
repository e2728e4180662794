//! A stand-alone plugin host, `comlrl-plugin-host plugin-host <path>`: the same server loop as
//! `comlrl plugin-host`, for running isolated plugins without the comlrl binary (the reward
//! crate's own tests use it).
fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args.as_slice() {
        [cmd, path] if cmd == "plugin-host" => {
            std::process::exit(comlrl_reward::serve_plugin_host(std::path::Path::new(path)))
        }
        _ => {
            eprintln!("usage: comlrl-plugin-host plugin-host <plugin path>");
            std::process::exit(2)
        }
    }
}
