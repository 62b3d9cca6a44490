//! The read-only inspector auditors use: every frame's fate reported, nothing repaired.

use hotgate_store::{InspectedFrame, inspect_table};

use crate::common::*;

fn kinds(frames: &[InspectedFrame]) -> Vec<&'static str> {
    frames
        .iter()
        .map(|f| match f {
            InspectedFrame::Rows { .. } => "rows",
            InspectedFrame::Damaged { .. } => "damaged",
            InspectedFrame::TornTail { .. } => "torn",
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_is_reported_frame_by_frame_and_nothing_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    closed_store_with_frames(dir.path(), 4).await;
    let intact = inspect_table(dir.path(), &events_name(), None).unwrap();
    assert_eq!(kinds(&intact), ["rows"; 4]);
    let InspectedFrame::Rows {
        segment,
        position,
        len,
        offsets,
        batch,
        ..
    } = &intact[1]
    else {
        unreachable!()
    };
    assert_eq!((offsets.start, offsets.end, batch.num_rows()), (3, 6, 3));

    // A flipped byte in the second frame: that frame is damaged, the rest still read.
    let mut bytes = std::fs::read(segment).unwrap();
    bytes[(*position + *len - 9) as usize] ^= 0x40;
    // And the last frame cut short, as a crash mid-write leaves it.
    let cut = bytes.len() - 5;
    bytes.truncate(cut);
    std::fs::write(segment, &bytes).unwrap();
    let frames = inspect_table(dir.path(), &events_name(), None).unwrap();
    assert_eq!(kinds(&frames), ["rows", "damaged", "rows", "torn"]);
    let InspectedFrame::Damaged {
        offsets, problem, ..
    } = &frames[1]
    else {
        unreachable!()
    };
    assert_eq!((offsets.start, offsets.end), (3, 6));
    assert!(problem.contains("CRC"), "{problem}");
    assert_eq!(
        std::fs::read(segment).unwrap(),
        bytes,
        "inspection changed the file"
    );

    // With a durable end, frames at or past it are left out.
    let InspectedFrame::Rows { log, .. } = &frames[0] else {
        unreachable!()
    };
    let ends = [(*log, 6)].into();
    let bounded = inspect_table(dir.path(), &events_name(), Some(&ends)).unwrap();
    assert_eq!(kinds(&bounded), ["rows", "damaged"]);
}
