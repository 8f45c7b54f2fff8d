#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| outrider_fuzz::orca(data));
