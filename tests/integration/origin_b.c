__attribute__((visibility("default"))) int origin_b_value(void) { return 42; }
