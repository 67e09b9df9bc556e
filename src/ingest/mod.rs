//! Ingestion: files and folders in, knowledge chunks out, written to the indexes.

pub mod chunk;
