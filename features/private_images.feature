Feature: Private images
  A team's production pod pulls its image from a private registry with the pod's
  imagePullSecrets. The virtual kubelet sends the login to the provider in the provider's own
  way (a RunPod registry credential, Vast's image_login). A pull the provider reports failed
  shows on the pod as a kubelet shows it (ErrImagePull, then ImagePullBackOff with the
  provider's reason, the kubelet's Events), its workload is ended so it stops billing, and the
  Secret created later lets the next attempt run. The password is a Secret value: it appears
  in no log of the virtual kubelet, no Event, no metric and no workload the provider lists.

  Background:
    Given a virtual kubelet with the provider under test
    And the provider supports private images
    And the provider's registry holds a private image that pulls only with its login

  Scenario: Without its pull Secret a private image waits in ImagePullBackOff, and the Secret lets it run
    When I create a GPU pod "model" of the private image with the pull Secret "regcred"
    Then pod "model" waits in "ErrImagePull" or "ImagePullBackOff" saying "pull access denied for" the image
    And pod "model" has the kubelet's Events of a failed pull
    And no workload of pod "model" is left at the provider
    When the pull Secret "regcred" is created with the image's login
    Then pod "model" becomes Running
    And the login's password appears in no log of the virtual kubelet, no Event, no metric and no workload the provider lists

  Scenario: An image larger than the container disk fails its pull, and ephemeral-storage makes room
    Given the provider's registry holds a public image of 50 GB
    When I create a GPU pod "big" of the 50 GB image
    Then pod "big" waits in "ErrImagePull" or "ImagePullBackOff" saying "no space left on device" the image
    And no workload of pod "big" is left at the provider
    When I create a GPU pod "roomy" of the 50 GB image asking for 60Gi of ephemeral-storage
    Then pod "roomy" becomes Running
