//! corral: a gateway that spawns one coding-agent child per project,
//! supervises it, and multiplexes it to many WebSocket clients.

pub mod access;
pub mod admin;
pub mod attach_cli;
pub mod auth;
pub mod broker;
pub mod child_socket;
pub mod client_addr;
pub mod config;
pub mod dashboard;
pub mod dialect;
pub mod egress;
pub mod egress_admin;
pub mod events;
pub mod fdlimit;
pub mod guard;
pub mod hub;
pub mod journal;
pub mod layers;
pub mod listener;
pub mod metrics;
pub mod notify;
pub mod offload;
pub mod process;
pub mod procfs;
pub mod projects;
pub mod registry;
pub mod scrub;
pub mod server;
pub mod shutdown;
pub mod state;
pub mod statefs;
pub mod throttle;
pub mod token_slots;
pub mod ws;
