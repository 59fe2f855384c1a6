fn main() {
    eprintln!("glint: nothing here yet");
    std::process::exit(2);
}
