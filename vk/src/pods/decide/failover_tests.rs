//! Unit tests of failover between providers in `decide`.

use super::*;

#[test]
fn create_errors_fail_over_on_capacity_only() {
    let capacity = ProviderError::Capacity {
        message: "no RTX4090".into(),
    };
    assert_eq!(
        after_create_error("vast", &capacity),
        AfterCreateError::NextCandidate
    );
    let invalid = ProviderError::Invalid {
        message: "image too large".into(),
    };
    assert_eq!(
        after_create_error("vast", &invalid),
        AfterCreateError::Fail {
            reason: "InvalidSpec",
            message: "provider vast rejected the pod: image too large".into()
        }
    );
    let limited = ProviderError::Transient {
        message: "429".into(),
        retry_after: Some(Duration::from_secs(7)),
    };
    assert_eq!(
        after_create_error("vast", &limited),
        AfterCreateError::Retry(Some(Duration::from_secs(7)))
    );
    for e in [
        ProviderError::transient("503"),
        ProviderError::Auth {
            message: "expired".into(),
        },
        ProviderError::NotFound,
    ] {
        assert_eq!(
            after_create_error("vast", &e),
            AfterCreateError::Retry(None),
            "{e:?}"
        );
    }
}
