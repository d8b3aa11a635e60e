//! The live badge of a pick, decided at each request from the people who clicked it: "hot"
//! when at least `K` different people clicked it within the last `M` minutes (the current
//! minute included), in at least `K` distinct minutes, else "popular" when the most people
//! of any pick of the campaign clicked it (every pick tied at the top is), else none.
//! People, not requests: one person scripting a link every minute is one person however
//! often they click, so they alone never make a pick hot; a burst of people within one
//! minute is not hot either (what matters is in how many minutes people clicked, as with the seed's Redis
//! bitmap of one bit per minute). People are counted by `people::Sketch`.

/// What a pick's badge shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Badge {
    Hot,
    Popular,
    /// The transparent image.
    None,
}

impl Badge {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hot => "hot",
            Self::Popular => "popular",
            Self::None => "none",
        }
    }
}

/// `K` and `M` (HOT_MIN_MINUTES, HOT_WINDOW_MINUTES).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadgeRule {
    /// K: people, and distinct minutes with clicks.
    pub hot_minutes: u32,
    /// M: the window, in minutes.
    pub window_minutes: u32,
}

impl Default for BadgeRule {
    fn default() -> Self {
        Self {
            hot_minutes: 3,
            window_minutes: 10,
        }
    }
}

/// Minutes since the Unix epoch.
pub fn minute_of(epoch_ms: u64) -> u64 {
    epoch_ms / 60_000
}

impl BadgeRule {
    /// The minutes whose activity counts at `now_minute`: `[first, now_minute]`.
    pub fn window(&self, now_minute: u64) -> (u64, u64) {
        let span = u64::from(self.window_minutes.max(1)) - 1;
        (now_minute.saturating_sub(span), now_minute)
    }

    /// `active_minutes`: minutes in which the pick was clicked (any, in any order);
    /// `window_people` the people who clicked it in the window; `item_people` the people who
    /// clicked it in the campaign, `top_people` the most people of any pick of the campaign.
    pub fn decide(
        &self,
        now_minute: u64,
        active_minutes: &[u64],
        window_people: u64,
        item_people: u64,
        top_people: u64,
    ) -> Badge {
        let (first, last) = self.window(now_minute);
        let mut recent: Vec<u64> = active_minutes
            .iter()
            .copied()
            .filter(|m| (first..=last).contains(m))
            .collect();
        recent.sort_unstable();
        recent.dedup();
        let k = u64::from(self.hot_minutes.max(1));
        if recent.len() as u64 >= k && window_people >= k {
            Badge::Hot
        } else if item_people > 0 && item_people >= top_people {
            Badge::Popular
        } else {
            Badge::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: BadgeRule = BadgeRule {
        hot_minutes: 3,
        window_minutes: 10,
    };

    #[test]
    fn hot_needs_k_distinct_minutes_inside_the_last_m() {
        let now = 1_000;
        // K-1 minutes: not hot; K: hot; the same minute twice counts once.
        assert_eq!(RULE.decide(now, &[1_000, 999], 3, 1, 9), Badge::None);
        assert_eq!(RULE.decide(now, &[1_000, 999, 998], 3, 1, 9), Badge::Hot);
        assert_eq!(
            RULE.decide(now, &[1_000, 1_000, 999, 999], 3, 1, 9),
            Badge::None
        );
        // The window is [now - M + 1, now]: minute 991 is in, 990 is out.
        assert_eq!(RULE.window(now), (991, 1_000));
        assert_eq!(RULE.decide(now, &[991, 995, 1_000], 3, 1, 9), Badge::Hot);
        assert_eq!(RULE.decide(now, &[990, 995, 1_000], 3, 1, 9), Badge::None);
        // Activity stops: the same clicks ten minutes later make nothing hot.
        assert_eq!(
            RULE.decide(now + 7, &[998, 999, 1_000], 3, 1, 9),
            Badge::Hot
        );
        assert_eq!(
            RULE.decide(now + 8, &[998, 999, 1_000], 3, 1, 9),
            Badge::None
        );
    }

    #[test]
    fn hot_needs_k_people_too() {
        let every_minute: Vec<u64> = (991..=1_000).collect();
        // One person (or two) clicking in every minute of the window: not hot.
        assert_eq!(RULE.decide(1_000, &every_minute, 1, 1, 1), Badge::Popular);
        assert_eq!(RULE.decide(1_000, &every_minute, 2, 2, 9), Badge::None);
        assert_eq!(RULE.decide(1_000, &every_minute, 3, 3, 9), Badge::Hot);
        // Many people in one minute: a burst, not hot.
        assert_eq!(RULE.decide(1_000, &[1_000], 50, 50, 50), Badge::Popular);
    }

    #[test]
    fn popular_is_the_top_item_ties_included_hot_first() {
        assert_eq!(RULE.decide(5, &[], 0, 7, 7), Badge::Popular);
        assert_eq!(RULE.decide(5, &[], 0, 6, 7), Badge::None);
        assert_eq!(
            RULE.decide(5, &[], 0, 0, 0),
            Badge::None,
            "no clicks, no badge"
        );
        assert_eq!(RULE.decide(5, &[3, 4, 5], 3, 7, 7), Badge::Hot, "hot wins");
        let once = BadgeRule {
            hot_minutes: 1,
            window_minutes: 1,
        };
        assert_eq!(once.decide(5, &[5], 1, 1, 9), Badge::Hot);
        assert_eq!(once.decide(5, &[4], 1, 1, 9), Badge::None);
    }
}
