//! pcap / pcapng file reader. (Stub: the capture-input task fills this in.)
