//! What open-time content counts per campaign (`mailctl status` shows it).

/// One thing counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenCount {
    /// An email's first slot fetched by a person's client (at most one per request).
    Open,
    /// The first slot fetched by an image proxy on the person's behalf (Gmail's, Yahoo's: a
    /// real open, seen once per email since the proxy caches).
    ProxyOpen,
    /// The first slot fetched by a scanner or script (no person).
    MachineOpen,
    /// A counted click (see `visitor::ClickVerdict`).
    Click,
    /// A counted click on an item this email had not clicked before.
    UniqueClick,
    /// A click not counted: HEAD, a scanner, within the grace after the freeze.
    IgnoredClick,
    /// An email's picks chosen and frozen.
    Frozen,
    /// An email's picks frozen as the fallback (the choice was not made in time).
    Fallback,
}

impl OpenCount {
    pub const ALL: [OpenCount; 8] = [
        Self::Open,
        Self::ProxyOpen,
        Self::MachineOpen,
        Self::Click,
        Self::UniqueClick,
        Self::IgnoredClick,
        Self::Frozen,
        Self::Fallback,
    ];

    /// The attribute of the counters item.
    pub fn attribute(self) -> &'static str {
        match self {
            Self::Open => "opens",
            Self::ProxyOpen => "proxyOpens",
            Self::MachineOpen => "machineOpens",
            Self::Click => "clicks",
            Self::UniqueClick => "uniqueClicks",
            Self::IgnoredClick => "ignoredClicks",
            Self::Frozen => "picksFrozen",
            Self::Fallback => "fallbacks",
        }
    }
}

/// A campaign's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenCounters {
    pub opens: u64,
    pub proxy_opens: u64,
    pub machine_opens: u64,
    pub clicks: u64,
    pub unique_clicks: u64,
    pub ignored_clicks: u64,
    pub picks_frozen: u64,
    pub fallbacks: u64,
}

impl OpenCounters {
    pub fn add(&mut self, what: OpenCount, n: u64) {
        let field = match what {
            OpenCount::Open => &mut self.opens,
            OpenCount::ProxyOpen => &mut self.proxy_opens,
            OpenCount::MachineOpen => &mut self.machine_opens,
            OpenCount::Click => &mut self.clicks,
            OpenCount::UniqueClick => &mut self.unique_clicks,
            OpenCount::IgnoredClick => &mut self.ignored_clicks,
            OpenCount::Frozen => &mut self.picks_frozen,
            OpenCount::Fallback => &mut self.fallbacks,
        };
        *field += n;
    }
}
