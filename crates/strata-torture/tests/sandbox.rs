fn main() {
    strata_sdk::maybe_run_internal();
}
