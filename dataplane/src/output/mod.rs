//! Human and machine-readable record output (JSON lines, table, CSV).
