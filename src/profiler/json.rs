//! Chrome Trace Event JSON export and import.
