//! Files through grants: a run reads exactly what its grant names, of its
//! own user (or a resource shared in its tenant); a file's record is
//! written only once its object is complete, and its upload row first.

use bytes::Bytes;
use gatehouse_core::Reason;
use gatehouse_ledger::Operation;
use gatehouse_plane::PlaneError;
use gatehouse_plane::files::{Bearer, InputFile};
use gatehouse_store::files::StoredFile;

use crate::support::{Node, bound, node, platform};

/// Stores `content` as an input file of `user` under `resource`, as the
/// platform's route does: namespace, upload row, object, record.
async fn store_input(node: &Node, user: &str, resource: &str, content: &'static [u8]) -> StoredFile {
    let input =
        InputFile { tenant_id: Some("t1"), user_id: user, resource, name: "data.csv", conversation_id: None };
    let key = node.plane.input_namespace("req", &platform(), &input).unwrap();
    let path = node.plane.begin_upload(&key).await.unwrap();
    let (storage, _) = node.plane.file_places().unwrap();
    let mut upload = storage.begin(&path).await.unwrap();
    upload.write(Bytes::from_static(content)).await.unwrap();
    let stored = upload.finish().await.unwrap();
    let file = StoredFile {
        file_id: path.file_id().to_owned(),
        tenant_id: "t1".into(),
        user_id: user.into(),
        namespace: key,
        session_id: None,
        resource: Some(resource.into()),
        name: "data.csv".into(),
        bytes: i64::try_from(stored.bytes).unwrap(),
        sha256: stored.sha256,
        verdict: "clean".into(),
        created_at: 0,
        run_id: None,
    };
    node.plane.record_file(&file, "platform").await.unwrap();
    file
}

#[tokio::test]
async fn a_sandbox_proves_itself_with_exactly_one_grant() {
    let node = node().await;
    let run = node.run("t1").await;
    let e = node.plane.file_grant("req", Bearer::Missing, None).unwrap_err();
    assert_eq!(e, PlaneError::Unauthenticated(Reason::GrantMalformed));
    let e = node.plane.file_grant("req", Bearer::Ambiguous, None).unwrap_err();
    assert_eq!(e, PlaneError::Unauthenticated(Reason::CredentialsAmbiguous));
    assert!(node.plane.file_grant("req", Bearer::Token("ceg1.forged"), None).is_err());
    let claims = node.plane.file_grant("req", Bearer::Token(&run.grant), None).unwrap();
    assert_eq!(claims.exec_id, run.run_id);
}

#[tokio::test]
async fn a_run_reads_the_inputs_its_grant_names_of_its_user_or_shared_and_nothing_else() {
    let node = node().await;
    let own = store_input(&node, "u1", "upload-1", b"a,b\n1,2\n").await;
    let other = store_input(&node, "u2", "upload-2", b"x\n").await;
    let skill = store_input(&node, "u2", "skill:pdf:3", b"shared\n").await;
    let mut req = crate::support::run_of("t1");
    req.input_files = vec![own.file_id.clone(), other.file_id.clone(), skill.file_id.clone()];
    let run = node.plane.create_run("req", &platform(), req).await.unwrap();
    let claims = node.plane.file_grant("req", Bearer::Token(&run.grant), None).unwrap();
    assert_eq!(node.plane.input_file_of_run("req", &claims, &own.file_id).await.unwrap().sha256, own.sha256);
    assert_eq!(
        node.plane.input_file_of_run("req", &claims, &skill.file_id).await.unwrap().file_id,
        skill.file_id
    );
    let e = node.plane.input_file_of_run("req", &claims, &other.file_id).await.unwrap_err();
    assert_eq!(e, PlaneError::NotFound(Some(Reason::FileUnknown)), "another user's own file, though named");
    // A file the grant does not name is refused by the spend, and recorded.
    let e = node.plane.input_file_of_run("req", &claims, "file_unnamed").await.unwrap_err();
    assert!(matches!(e, PlaneError::Refused(_)), "{e:?}");
    assert!(node.plane.flush().await);
    let page = gatehouse_store::PageRequest { limit: 10, cursor: None };
    let refusals = node.plane.refusals("req", &platform(), Default::default(), &page).await.unwrap();
    assert_eq!(refusals.read.items.len(), 1);
    assert_eq!(refusals.read.items[0].event.run_id.as_deref(), Some(run.run_id.as_str()));
}

#[tokio::test]
async fn an_input_goes_to_a_tenant_the_caller_may_act_on_under_a_valid_name() {
    let node = node().await;
    let input = |name: &'static str| InputFile {
        tenant_id: Some("t1"),
        user_id: "u1",
        resource: "upload-1",
        name,
        conversation_id: None,
    };
    let e = node.plane.input_namespace("req", &bound("ci", &["t2"]), &input("a.txt")).unwrap_err();
    assert_eq!(e, PlaneError::Refused(Reason::TenantNotAllowed));
    let e = node.plane.input_namespace("req", &platform(), &input("../a")).unwrap_err();
    assert!(matches!(e, PlaneError::BadInput(_)), "{e:?}");
    let user = node.plane.input_namespace("req", &platform(), &input("a.txt")).unwrap();
    let in_conversation = node
        .plane
        .input_namespace("req", &platform(), &InputFile { conversation_id: Some("c1"), ..input("a.txt") })
        .unwrap();
    assert_ne!(user, in_conversation, "a conversation narrows the user's namespace");
}

#[tokio::test]
async fn deleting_an_input_takes_its_record_and_its_object() {
    let node = node().await;
    let file = store_input(&node, "u1", "upload-1", b"gone\n").await;
    node.plane.delete_input("t1", &file.file_id, "platform").await.unwrap();
    let e = node.plane.input_file("t1", &file.file_id).await.unwrap_err();
    assert_eq!(e, PlaneError::NotFound(Some(Reason::FileUnknown)));
    let (storage, _) = node.plane.file_places().unwrap();
    let path = gatehouse_files::ObjectPath::new(&file.namespace, &file.file_id).unwrap();
    assert!(storage.read(&path).await.is_err(), "the object went with its record");
    let e = node
        .plane
        .spend_for_file(
            "req",
            &node.plane.file_grant("req", Bearer::Token(&node.run("t1").await.grant), None).unwrap(),
            &Operation::ReadFile { file: file.file_id.clone() },
        )
        .await
        .unwrap_err();
    assert!(matches!(e, PlaneError::Refused(_)));
}
