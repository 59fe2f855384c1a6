//! GGUF reader and writer (being written).
