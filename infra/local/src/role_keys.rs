//! The keys a role's requests are signed with on the local stack: each role has an access
//! key of its own (which the local IAM check knows it by), all with one secret. Used by the
//! stack (a function's environment) and by `iam` (a function's SDK configuration).

use std::collections::BTreeMap;

/// The secret key every role's key signs with (the emulator checks only the key id).
pub const SECRET: &str = "local-role-secret";

/// The access key a role's requests are signed with on the local stack.
pub fn access_key(stack: &str, role: &str) -> String {
    format!("{stack}.{role}")
}

/// The environment Lambda adds for a function whose role is `role` on `stack` (for a
/// function started as a process).
pub fn role_env(stack: &str, role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("AWS_ACCESS_KEY_ID".to_owned(), access_key(stack, role)),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), SECRET.to_owned()),
    ])
}
