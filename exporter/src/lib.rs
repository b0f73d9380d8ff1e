//! IPFIX / NetFlow v9 exporter. (Filled in by the exporter task.)
