fn main() { mailflow::hello(); }
