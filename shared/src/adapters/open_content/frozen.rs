//! An email's frozen picks: the lease of the function choosing them, then the picks alone.

use super::{expires, Conditional, OpenContentTable, EMAIL_DAYS};
use crate::adapters::item::{n, number, s, Item};
use crate::domain::ledger::SendKey;
use crate::domain::open_content::{FreezeClaim, Picks};
use crate::ports::ContentStoreError;
use aws_sdk_dynamodb::types::ReturnValue;
use std::collections::HashMap;

fn email_key(email: &SendKey) -> String {
    format!("E#{}#{}", email.campaign_id(), email.user_id())
}

fn picks_of(item: &Item) -> Result<Option<Picks>, ContentStoreError> {
    match item.get("picks").and_then(|v| v.as_s().ok()) {
        None => Ok(None),
        Some(json) => serde_json::from_str(json)
            .map(Some)
            .map_err(|e| ContentStoreError(format!("frozen picks do not parse: {e}"))),
    }
}

impl OpenContentTable {
    pub(super) async fn read_picks(
        &self,
        email: &SendKey,
        consistent: bool,
    ) -> Result<Option<Picks>, ContentStoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(email_key(email)))
            .key("sk", s("picks"))
            .projection_expression("picks")
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| self.error("GetItem picks", e))?;
        picks_of(&out.item.unwrap_or_default())
    }

    pub(super) async fn claim_lease(
        &self,
        email: &SendKey,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
    ) -> Result<FreezeClaim, ContentStoreError> {
        let values = HashMap::from([
            (":owner".into(), s(owner)),
            (":until".into(), n(lease_until_ms)),
            (":now".into(), n(now_ms)),
            (":expires".into(), expires(EMAIL_DAYS)),
        ]);
        let outcome = self
            .update(
                "claim picks",
                email_key(email),
                "picks",
                "SET leaseOwner = :owner, leaseUntil = :until, expiresAt = :expires",
                Some("attribute_not_exists(picks) AND (attribute_not_exists(leaseUntil) OR leaseUntil <= :now)"),
                values,
                ReturnValue::None,
            )
            .await;
        match outcome? {
            Conditional::Done(_) => Ok(FreezeClaim::Won),
            Conditional::Refused(old) => match picks_of(&old)? {
                Some(picks) => Ok(FreezeClaim::Frozen(picks)),
                None => Ok(FreezeClaim::Busy {
                    lease_until_ms: number::<u64>(&old, "leaseUntil").unwrap_or(0),
                }),
            },
        }
    }

    pub(super) async fn freeze_picks(
        &self,
        email: &SendKey,
        picks: &Picks,
    ) -> Result<Picks, ContentStoreError> {
        let json = serde_json::to_string(picks)
            .map_err(|e| ContentStoreError(format!("picks do not serialise: {e}")))?;
        let values = HashMap::from([
            (":picks".into(), s(json)),
            (":expires".into(), expires(EMAIL_DAYS)),
        ]);
        match self
            .update(
                "freeze picks",
                email_key(email),
                "picks",
                "SET picks = :picks, expiresAt = :expires REMOVE leaseOwner, leaseUntil",
                Some("attribute_not_exists(picks)"),
                values,
                ReturnValue::None,
            )
            .await?
        {
            Conditional::Done(_) => Ok(picks.clone()),
            Conditional::Refused(old) => picks_of(&old)?
                .ok_or_else(|| ContentStoreError("freeze refused, yet nothing frozen".into())),
        }
    }
}
