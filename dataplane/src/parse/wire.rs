//! Zero-copy header views. (Stub: the parser task fills this in.)
