//! Configuration. (Filled in by the live-appliance task.)
