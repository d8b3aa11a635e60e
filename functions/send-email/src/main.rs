//! SendEmail Lambda: wiring only; the logic is `mailflow::stages::send_email`.

use mailflow::assemble::{self, start};
use mailflow::config::SendEmailConfig;
use mailflow::runtime::serve;

// One thread: an execution environment serves one event at a time, and waking a second
// worker thread for every response costs more CPU than the concurrency it would add.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (config, sdk) = start(SendEmailConfig::from_source).await;
    let mailer = assemble::ses_mailer(&config, &sdk);
    serve(assemble::send_email(config, &sdk, mailer)).await
}
