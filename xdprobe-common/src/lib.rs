#![no_std]
//! Types shared by kernel and user space. (Filled in by the live-appliance task.)
