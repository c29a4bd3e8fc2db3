fn main() -> std::process::ExitCode {
    mtlab::cli::main()
}
